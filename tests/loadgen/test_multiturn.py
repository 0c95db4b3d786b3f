"""Multi-turn sessions: each turn carries the server's actual previous answers, a session holds its
concurrency slot for all its turns, think time is kept, and the summary has a per-turn table."""

from __future__ import annotations

import asyncio
import io
import json
import multiprocessing
import socket
import subprocess
import sys

import httpx
import pytest
from rich.console import Console

from loadgen.flags import memory_note
from loadgen.plan.config import RunConfig
from loadgen.plan.datasets import DatasetConfig
from loadgen.report.terminal import print_table
from loadgen.run.runner import run

THINK_S = 0.1
SESSIONS, TURNS = 4, 3


def _dcfg(**kw) -> DatasetConfig:
    base = {"name": "multi-turn", "num_prompts": SESSIONS, "multi_turn_num_turns": TURNS, "multi_turn_user_len": 6,
            "random_output_len": 3, "random_range_ratio": 1.0, "multi_turn_think_time_s": THINK_S,
            "use_server_tokenize": False}
    return DatasetConfig(**{**base, **kw})


def _run(server, dcfg: DatasetConfig | None = None, **kw):
    cfg = RunConfig(**{"base_url": server.base_url, "concurrency": 2, "num_prompts": SESSIONS,
                       "server_metrics": False, **kw})
    return run(cfg, dcfg or _dcfg())


def _logged(server) -> list[dict]:
    return httpx.get(server.base_url + "/requests", timeout=10).json()


def _by_session(records) -> dict[int, list]:
    sessions: dict[int, list] = {}
    for r in records:
        sessions.setdefault(r.session, []).append(r)
    return {s: sorted(recs, key=lambda r: r.turn) for s, recs in sessions.items()}


def test_each_turn_carries_the_previous_answers_as_the_server_sent_them(start_server):
    server = start_server("--ttft-ms", "5", "--gap-ms", "2", "--log-requests")
    result = _run(server)
    assert result.summary["completed"] == SESSIONS * TURNS and result.summary["failed"] == 0
    assert sorted(r.index for r in result.records) == list(range(SESSIONS * TURNS))
    log = _logged(server)
    answers = {}  # the conversation as a request sent it -> the answer the server gave
    for entry in log:
        answers[json.dumps(entry["body"]["messages"])] = entry["answer"]
    later = [e for e in log if len(e["body"]["messages"]) > 1]
    assert len(later) == SESSIONS * (TURNS - 1)
    for entry in later:
        messages = entry["body"]["messages"]
        assert [m["role"] for m in messages] == ["user", "assistant"] * (len(messages) // 2) + ["user"]
        previous = messages[:-2]
        assert messages[-2]["content"] == answers[json.dumps(previous)]  # exactly turn k's actual answer
        assert entry["body"]["max_tokens"] == 3


def test_a_session_holds_its_slot_and_keeps_the_think_time(start_server):
    server = start_server("--ttft-ms", "20", "--gap-ms", "5")
    result = _run(server)
    sessions = _by_session(result.records)
    assert sorted(sessions) == list(range(SESSIONS))
    spans = []
    for recs in sessions.values():
        assert [r.turn for r in recs] == list(range(TURNS))
        for before, after in zip(recs, recs[1:], strict=False):
            assert after.intended_ns == before.end_ns + int(THINK_S * 1e9)
            assert after.start_ns >= before.end_ns + THINK_S * 1e9
        spans.append((recs[0].start_ns, recs[-1].end_ns))
    # --concurrency 2 counts sessions: never more than two sessions between their first send and last end
    edges = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans], key=lambda e: (e[0], e[1]))
    open_now = peak = 0
    for _, step in edges:
        open_now += step
        peak = max(peak, open_now)
    assert peak == 2


def test_per_turn_table_in_the_summary_and_the_terminal(start_server):
    server = start_server("--ttft-ms", "5", "--gap-ms", "2")
    result = _run(server, _dcfg(multi_turn_think_time_s=0.0))
    rows = result.summary["per_turn"]
    assert [(r["turn"], r["count"], r["failed"]) for r in rows] == [(t, SESSIONS, 0) for t in range(1, TURNS + 1)]
    assert all(r["p50_ttft_ms"] is not None and r["mean_input_tokens"] > 0 for r in rows)
    out = io.StringIO()
    print_table(result, Console(file=out, width=200))
    assert all(f"turn {t}" in out.getvalue() for t in range(1, TURNS + 1))


def test_completions_backend_sends_the_conversation_as_text(start_server):
    server = start_server("--ttft-ms", "5", "--gap-ms", "2", "--log-requests")
    _run(server, _dcfg(num_prompts=1, multi_turn_think_time_s=0.0), backend="openai-completions", num_prompts=1)
    log = _logged(server)
    assert len(log) == TURNS
    for before, after in zip(log, log[1:], strict=False):
        assert after["body"]["prompt"].startswith(before["body"]["prompt"] + "\n" + before["answer"] + "\n")


def test_sharegpt_sessions_use_the_human_turns_in_order(start_server, tmp_path):
    conv = [{"from": "human", "value": f"question {i}"} if i % 2 == 0 else {"from": "gpt", "value": "reply " * 5}
            for i in range(6)]
    path = tmp_path / "sg.json"
    path.write_text(json.dumps([{"conversations": conv}, {"conversations": conv[:2]}]))
    server = start_server("--ttft-ms", "5", "--gap-ms", "2", "--log-requests")
    dcfg = DatasetConfig(name="multi-turn", dataset_path=str(path), num_prompts=1, disable_shuffle=True,
                         use_server_tokenize=False)
    result = _run(server, dcfg, num_prompts=1)  # --num-prompts counts sessions: one session, three turns
    assert result.summary["completed"] == 3
    last = _logged(server)[-1]["body"]["messages"]
    assert [m["content"] for m in last if m["role"] == "user"] == ["question 0", "question 2", "question 4"]


def test_multi_turn_with_duration_is_a_usage_error():
    done = subprocess.run([sys.executable, "-m", "loadgen", "--dataset", "multi-turn", "--duration", "5",
                           "--concurrency", "2"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "counts sessions" in done.stderr


def _serve_big_answers(sock: socket.socket, answer_bytes: int) -> None:
    """Every chat completion gets a whole (not streamed) answer of `answer_bytes`; GET /stats gives
    the largest request body received."""
    largest = 0

    async def handle(reader, writer) -> None:
        nonlocal largest
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                size = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                             if line.lower().startswith(b"content-length:")), 0)
                largest = max(largest, len(await reader.readexactly(size)))
                if head.startswith(b"GET /stats"):
                    out = json.dumps({"largest_body": largest}).encode()
                else:
                    out = json.dumps({"choices": [{"index": 0, "finish_reason": "length", "message": {
                        "role": "assistant", "content": "x" * answer_bytes}}]}).encode()
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
                             % len(out) + out)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(handle, sock=sock)
        await server.serve_forever()

    asyncio.run(main())


@pytest.fixture
def big_answer_server():
    """A server in its own process on 127.0.0.1 answering 256 KiB per turn: its base URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    proc = multiprocessing.get_context("fork").Process(target=_serve_big_answers, args=(sock, 256 << 10), daemon=True)
    proc.start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        proc.terminate()
        proc.join(10)
        sock.close()


def test_a_session_ends_before_its_conversation_passes_the_context_bound(big_answer_server):
    bound = 1 << 20
    dcfg = _dcfg(num_prompts=1, multi_turn_num_turns=40, multi_turn_think_time_s=0.0,
                 multi_turn_max_context_bytes=bound)
    result = run(RunConfig(base_url=big_answer_server, model="m", stream=False, concurrency=1, num_prompts=1,
                           server_metrics=False), dcfg)
    recs = sorted(result.records, key=lambda r: r.turn)
    # 256 KiB answers: after four answers the conversation passes 1 MiB, so turn 5 is not sent
    assert [r.ok for r in recs] == [True] * 4 + [False], [(r.turn, r.error_class) for r in recs]
    assert recs[-1].error_class == "context_too_large" and f"{bound}" in recs[-1].error_message
    assert result.summary["errors"]["context_too_large"]["count"] == 1
    largest = httpx.get(big_answer_server + "/stats", timeout=10).json()["largest_body"]
    assert 3 * (256 << 10) < largest < bound + 4096


def test_the_memory_warning_counts_a_session_context_twice():
    cfg = RunConfig(concurrency=100, num_prompts=1, max_response_bytes=1 << 20)
    plain = DatasetConfig(name="random")
    sessions = DatasetConfig(name="multi-turn", multi_turn_max_context_bytes=8 << 20)
    available = 1 << 30  # 100 streams x 1 MiB fit; 100 sessions x (1 + 2 x 8) MiB do not
    assert memory_note(cfg, plain, available) is None
    note = memory_note(cfg, sessions, available)
    assert note is not None and "--multi-turn-max-context-bytes" in note and "1.7 GiB" in note
