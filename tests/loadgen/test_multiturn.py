"""Multi-turn sessions: each turn carries the server's actual previous answers, a session holds its
concurrency slot for all its turns, think time is kept, and the summary has a per-turn table."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import httpx
from rich.console import Console

from loadgen.plan.config import RunConfig
from loadgen.plan.datasets import DatasetConfig
from loadgen.report.results import print_table
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
