"""Reasoning and tool-call deltas timed apart (README "Reasoning and tool calls"): parsing stamped
bodies, the run's summary, and end to end against the scripted server's reasoning and tool-call
modes, each stamp checked against the server's own write times (`/truth`).

No assertion on speed: the server paces tokens 100 ms apart and the checks are which write each
stamp belongs to, and the counts."""

from __future__ import annotations

import csv
import json

import httpx
import pytest

from loadgen.cli import main
from loadgen.measure.metrics import SOURCE_REASONING_EVENTS, SOURCE_REASONING_USAGE, output_kinds
from loadgen.measure.records import RequestRecord
from loadgen.plan.config import RunConfig
from loadgen.report.html import render
from loadgen.run.output_kinds import has_kinds
from loadgen.run.sse import MalformedSSE, parse_stream, parse_whole
from loadgen.selftest.scripted_stream import TOOL_NAME

DONE = b"data: [DONE]\n\n"
MS = 1e6
KERNEL_SLACK_MS = 50.0  # as in test_token_events: a kernel stamp lies within this of its write
NUM_TOKENS, NUM_REASONING, GAP_MS, NUM_PROMPTS = 6, 3, 100, 2


def _rec() -> RequestRecord:
    return RequestRecord(index=0, worker=0, intended_ns=0, start_ns=0, end_ns=0)


def _event(delta: dict, usage: dict | None = None) -> bytes:
    chunk = {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
    if usage is not None:
        chunk["usage"] = usage
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


def _usage(completion: int, reasoning: int | None = None) -> bytes:
    usage: dict = {"prompt_tokens": 3, "completion_tokens": completion}
    if reasoning is not None:
        usage["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    return b"data: " + json.dumps({"choices": [], "usage": usage}).encode() + b"\n\n"


def _parse(events: list[bytes]) -> RequestRecord:
    """Each event in its own read, stamped 100, 200, ...; the tail (usage, [DONE]) in the last."""
    rec = _rec()
    parse_stream(rec, events, [100 * (i + 1) for i in range(len(events))])
    return rec


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_reasoning_events_then_the_answer_are_timed_apart(field):
    rec = _parse([_event({field: "r1"}), _event({field: "r2", "content": None}), _event({"content": "a"}),
                  _event({"content": "b"}) + _usage(4, reasoning=2) + DONE])
    assert rec.first_token_ns == 100 and rec.chunk_ns == [100, 200, 300, 400]  # TTFT: any kind
    assert rec.first_answer_ns == 300
    assert (rec.first_reasoning_ns, rec.last_reasoning_ns, rec.num_reasoning_events) == (100, 200, 2)
    assert (rec.usage_reasoning_tokens, rec.reasoning_event_tokens, rec.client_output_tokens) == (2, 2, 4)
    assert rec.first_tool_call_ns is None and rec.num_tool_call_events == 0


def test_reasoning_tokens_per_event_follow_the_streamed_usage():
    rec = _parse([_event({"reasoning_content": "r1 r2"}, {"prompt_tokens": 3, "completion_tokens": 2}),
                  _event({"reasoning_content": "r3"}, {"prompt_tokens": 3, "completion_tokens": 3}),
                  _event({"reasoning_content": "r4", "content": "a"}, {"prompt_tokens": 3, "completion_tokens": 5})
                  + DONE])
    # The last event carries both: it is the first answer and a reasoning event.
    assert rec.first_answer_ns == 300 and rec.num_reasoning_events == 3
    assert rec.reasoning_event_tokens == 5 and rec.usage_reasoning_tokens is None


def test_tool_call_deltas_are_token_events_with_their_own_first_stamp():
    name = {"tool_calls": [{"index": 0, "id": "call_0", "type": "function",
                            "function": {"name": "get_weather", "arguments": ""}}]}
    args = [{"tool_calls": [{"index": 0, "function": {"arguments": part}}]} for part in ('{"city"', ': "Paris"}')]
    rec = _parse([_event({"role": "assistant", "content": ""}), _event(name), _event(args[0]),
                  _event(args[1]) + _usage(3) + DONE])
    assert rec.first_token_ns == 200 and rec.chunk_ns == [200, 300, 400]  # the role chunk is no token
    assert (rec.first_tool_call_ns, rec.num_tool_call_events, rec.client_output_tokens) == (200, 3, 3)
    assert rec.first_answer_ns is None and rec.num_reasoning_events == 0
    assert rec.output_chars == len('get_weather{"city": "Paris"}')


def test_a_plain_stream_skips_the_per_event_pass_and_its_answer_is_its_first_token():
    events = [_event({"content": "a", "reasoning_content": None, "tool_calls": None}),
              _event({"content": "b"}) + _usage(2) + DONE]
    assert not has_kinds(b"".join(events))
    assert has_kinds(_event({"reasoning": "r"})) and has_kinds(b'{"tool_calls" : [{')
    assert not has_kinds(b'{"reasoning": "", "tool_calls": [ ], "reasoning_content":null}')
    assert not has_kinds(_event({"content": 'say "reasoning_content": "x"'}))  # text that names the field
    rec = _parse(events)
    assert rec.first_answer_ns == rec.first_token_ns == 100 and rec.num_reasoning_events == 0
    # As vLLM answers a forced tool call it never streamed: one closing token with no text.
    rec = _parse([_event({"role": "assistant", "content": ""}),
                  b'data: {"choices":[{"index":0,"delta":{"content":""},"finish_reason":"length"}]}\n\n'
                  + _usage(40) + DONE])
    assert rec.first_token_ns == 200 and rec.first_answer_ns is None


def test_a_whole_response_with_a_tool_call_and_reasoning():
    rec = _rec()
    body = json.dumps({"choices": [{"message": {"reasoning_content": "think", "content": None, "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 9, "completion_tokens_details": {"reasoning_tokens": 5}}})
    assert parse_whole(rec, body.encode(), 700) == "thinkf{}"
    assert (rec.first_tool_call_ns, rec.num_tool_call_events, rec.first_reasoning_ns) == (700, 1, 700)
    assert rec.first_answer_ns is None and rec.usage_reasoning_tokens == 5


def _kind_rec(index: int, **fields) -> RequestRecord:
    return RequestRecord(index=index, worker=0, intended_ns=0, start_ns=0, end_ns=10 * MS, first_token_ns=MS,
                         chunk_ns=[MS], **fields)


def test_summary_says_where_reasoning_tokens_come_from_and_leaves_out_latencies_nobody_has():
    cfg = RunConfig(concurrency=1, num_prompts=2)
    assert output_kinds(cfg, [_kind_rec(0, first_answer_ns=MS)]) == {}  # no reasoning, no tool call
    both = [_kind_rec(0, first_answer_ns=4 * MS, first_reasoning_ns=MS, last_reasoning_ns=3 * MS,
                      num_reasoning_events=3, reasoning_event_tokens=3, usage_reasoning_tokens=7),
            _kind_rec(1, first_answer_ns=5 * MS, first_reasoning_ns=MS, last_reasoning_ns=2 * MS,
                      num_reasoning_events=2, reasoning_event_tokens=2)]
    s = output_kinds(cfg, both)
    assert (s["requests_with_reasoning"], s["total_reasoning_tokens"], s["mean_reasoning_tokens"]) == (2, 9, 4.5)
    assert s["reasoning_tokens_source"] == "mixed" and s["requests_with_tool_calls"] == 0
    assert (s["mean_ttfo_ms"], s["mean_reasoning_duration_ms"]) == (4.5, 1.5)
    assert not any("tool_call_ms" in key for key in s)
    assert output_kinds(cfg, both[1:])["reasoning_tokens_source"] == SOURCE_REASONING_EVENTS
    assert output_kinds(cfg, both[:1])["reasoning_tokens_source"] == SOURCE_REASONING_USAGE
    tools = output_kinds(cfg, [_kind_rec(0, first_tool_call_ns=2 * MS, num_tool_call_events=4)])
    assert (tools["requests_with_reasoning"], tools["reasoning_tokens_source"], tools["mean_reasoning_tokens"]) == (
        0, None, None)
    assert (tools["requests_with_tool_calls"], tools["total_tool_call_events"], tools["mean_ttf_tool_call_ms"]) == (
        1, 4, 2.0)


def _server(start_server, *flags: str):
    return start_server("--ttft-ms", "20", "--gap-ms", str(GAP_MS), "--num-tokens", str(NUM_TOKENS),
                        "--truth-stamps", *flags)


def _run(server, tmp_path, *flags: str) -> tuple[dict, list[dict], dict]:
    """One loadgen run: its results JSON, its records and the server's write times per record."""
    prefix = f"k{len(list(tmp_path.iterdir()))}-"
    out, recs = tmp_path / f"{prefix}r.json", tmp_path / f"{prefix}r.jsonl"
    rc = main(["--base-url", server.base_url, "--num-prompts", str(NUM_PROMPTS), "--concurrency", "2",
               "--random-input-len", "8", "--random-output-len", str(NUM_TOKENS), "--quiet",
               "--no-server-metrics", "--request-id-prefix", prefix, "--output", str(out),
               "--records", str(recs), *flags])
    assert rc == 0
    rows = [json.loads(line) for line in recs.read_text().splitlines()]
    truth = httpx.get(server.base_url + "/truth", timeout=10).json()
    return json.loads(out.read_text()), rows, {row["index"]: truth[f"{prefix}{row['index']}"] for row in rows}


def _check_stamp(stamp_ms: float, row: dict, write_ns: int) -> None:
    """A stamp (ms since the run's t0) is its write's arrival: after it, within the kernel slack."""
    stamp = round(stamp_ms * MS) + row["clock_t0_ns"]
    assert write_ns - MS <= stamp < write_ns + KERNEL_SLACK_MS * MS


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_time_to_first_answer_token_is_the_write_after_the_scripted_reasoning(start_server, tmp_path, field):
    server = _server(start_server, "--reasoning-tokens", str(NUM_REASONING), "--reasoning-field", field)
    data, rows, truth = _run(server, tmp_path)
    for row in rows:
        written = truth[row["index"]]
        first_answer_ms = row["ttfo_ms"] - row["ttft_ms"] + row["first_token_ms"]
        assert first_answer_ms == pytest.approx(row["chunk_ms"][NUM_REASONING], abs=1e-6)
        _check_stamp(row["first_token_ms"], row, written[0])
        _check_stamp(first_answer_ms, row, written[NUM_REASONING])
        _check_stamp(row["last_reasoning_ms"], row, written[NUM_REASONING - 1])
        assert (row["num_reasoning_events"], row["reasoning_event_tokens"], row["usage_reasoning_tokens"]) == (
            NUM_REASONING, NUM_REASONING, NUM_REASONING)
        assert len(row["chunk_ms"]) == NUM_TOKENS  # reasoning events are token events (TTFT, ITL)
    assert data["requests_with_reasoning"] == NUM_PROMPTS
    assert data["total_reasoning_tokens"] == NUM_PROMPTS * NUM_REASONING
    assert data["reasoning_tokens_source"] == SOURCE_REASONING_USAGE
    # TTFO - TTFT is the server's time from the first reasoning write to the first answer write.
    true_gap_ms = sum(w[NUM_REASONING] - w[0] for w in truth.values()) / len(truth) / MS
    assert data["mean_ttfo_ms"] - data["mean_ttft_ms"] == pytest.approx(true_gap_ms, abs=2 * KERNEL_SLACK_MS)
    assert "mean_ttf_tool_call_ms" not in data
    data, _, _ = _run(server, tmp_path, "--no-usage")
    assert (data["total_reasoning_tokens"], data["reasoning_tokens_source"]) == (
        NUM_PROMPTS * NUM_REASONING, SOURCE_REASONING_EVENTS)


def test_tool_call_deltas_are_timed_counted_and_in_the_output(start_server, tmp_path):
    server = _server(start_server, "--tool-calls")
    data, rows, truth = _run(server, tmp_path)
    for row in rows:
        assert row["ttf_tool_call_ms"] == row["ttft_ms"] and row["ttfo_ms"] is None
        _check_stamp(row["first_token_ms"], row, truth[row["index"]][0])
        assert row["num_tool_call_events"] == row["client_output_tokens"] == len(row["chunk_ms"]) == NUM_TOKENS
    assert (data["requests_with_tool_calls"], data["total_tool_call_events"]) == (NUM_PROMPTS, NUM_PROMPTS * NUM_TOKENS)
    assert data["mean_ttf_tool_call_ms"] == data["mean_ttft_ms"] and "mean_ttfo_ms" not in data
    assert data["total_output_tokens"] == NUM_PROMPTS * NUM_TOKENS
    assert data["summary"]["output_tokens_reconciliation"]["usage_minus_client"] == 0
    page = render([data], ["tools"])
    assert "time to first tool-call token mean (ms)" in page and "Requests with tool calls" in page


def test_reasoning_then_a_tool_call_in_the_terminal_table_and_the_csv(start_server, tmp_path, capsys):
    server = _server(start_server, "--reasoning-tokens", "2", "--tool-calls")
    rc = main(["--base-url", server.base_url, "--num-prompts", "2", "--concurrency", "2", "--random-input-len", "8",
               "--random-output-len", str(NUM_TOKENS), "--no-server-metrics", "--csv", str(tmp_path / "r.csv")])
    assert rc == 0
    out = capsys.readouterr().out
    for label in ("Reasoning ", "TTF tool call", "Requests with reasoning", "Tool-call events (in the output)"):
        assert label in out
    assert "TTFO (answer)" not in out  # every answer was a tool call
    with (tmp_path / "r.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(r["ttfo_ms"], r["reasoning_tokens"], r["num_tool_call_events"]) for r in rows] == [("", "2", "4")] * 2
    assert all(float(r["ttf_tool_call_ms"]) > float(r["ttft_ms"]) for r in rows)  # after the two reasoning writes


def test_tools_flag_sends_the_schema_and_bad_tool_flags_are_usage_errors(start_server, tmp_path, capsys):
    server = _server(start_server)
    tools = [{"type": "function", "function": {"name": TOOL_NAME, "parameters": {"type": "object"}}}]
    path = tmp_path / "tools.json"
    path.write_text(json.dumps(tools))
    base = ["--base-url", server.base_url, "--num-prompts", "1", "--concurrency", "1", "--random-input-len", "8",
            "--random-output-len", "2", "--quiet", "--no-server-metrics"]
    assert main([*base, "--tools", str(path), "--tool-choice", "required"]) == 0
    body = httpx.get(server.base_url + "/last_request", timeout=10).json()["body"]
    assert (body["tools"], body["tool_choice"]) == (tools, "required")
    assert main([*base, "--tools", str(path), "--extra-request-body", '{"tool_choice": "none"}']) == 0
    assert httpx.get(server.base_url + "/last_request", timeout=10).json()["body"]["tool_choice"] == "none"
    bad = tmp_path / "bad.json"
    for text in ('{"type": "function"}', "[]", '[{"type": "function", "function": {}}]', "[1"):
        bad.write_text(text)
        with pytest.raises(SystemExit) as exc:
            main([*base, "--tools", str(bad)])
        assert exc.value.code == 2
    capsys.readouterr()
    for flags in (["--tool-choice", "auto"], ["--tools", str(path), "--backend", "openai-completions"]):
        with pytest.raises(SystemExit) as exc:
            main([*base, *flags])
        assert exc.value.code == 2
    assert "--tool-choice needs --tools" in capsys.readouterr().err


def test_odd_tool_calls_are_one_line_errors_or_still_tool_calls():
    # Arguments as an object (not OpenAI's string): still a tool-call event, with the name as its text.
    rec = _parse([_event({"tool_calls": [{"index": 0, "function": {"name": "f", "arguments": {"a": 1}}}]})
                  + _event({"tool_calls": [{"index": 0}]}) + DONE])
    assert (rec.num_tool_call_events, rec.first_tool_call_ns, rec.output_chars) == (2, 100, 1)
    # An empty list is no tool call and, alone in a delta, no token event (as a delta of nothing).
    rec = _parse([_event({"content": "a"}), _event({"tool_calls": []}), _event({"content": "b"}) + DONE])
    assert (rec.chunk_ns, rec.num_tool_call_events, rec.num_empty_text_events) == ([100, 300], 0, 0)
    for bad in ({"tool_calls": "f"}, {"tool_calls": [1]}):
        with pytest.raises(MalformedSSE, match="undecodable event"):
            _parse([_event(bad) + DONE])
    with pytest.raises(MalformedSSE, match="undecodable event"):
        _parse([_event({"content": "a"}) + _usage(1, reasoning=-1) + DONE])


def test_two_tool_calls_in_one_delta_are_one_event_with_both_texts():
    calls = {"tool_calls": [{"index": 0, "id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}},
                            {"index": 1, "id": "b", "type": "function", "function": {"name": "g", "arguments": "[1]"}}]}
    rec = _parse([_event(calls) + _usage(2) + DONE])
    assert (rec.num_tool_call_events, rec.output_chars) == (1, len("f{}g[1]"))
