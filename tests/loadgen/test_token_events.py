"""Token events end to end: the scripted server sends every third token with an empty text, and each
rule's events, counts and stamps are checked against the server's own write times (`/truth`).

No assertion on speed: the server paces tokens 150 ms apart and the checks are which write each
stamp belongs to, and how many events each rule takes."""

from __future__ import annotations

import json

import httpx
import pytest

from loadgen.cli import main

NUM_TOKENS, EMPTY_EVERY, GAP_MS = 7, 3, 150
EMPTY = [i for i in range(NUM_TOKENS) if (i + 1) % EMPTY_EVERY == 0]  # token 3 and 6 (0-based 2, 5)
WITH_TEXT = [i for i in range(NUM_TOKENS) if i not in EMPTY]  # the first and the last have text
NUM_PROMPTS = 2
MS = 1e6
#: With kernel stamps an event is stamped at its arrival: within this of its write on 127.0.0.1.
KERNEL_SLACK_MS = 50.0


def _server(start_server, *flags: str):
    return start_server("--ttft-ms", "20", "--gap-ms", str(GAP_MS), "--num-tokens", str(NUM_TOKENS),
                        "--empty-every", str(EMPTY_EVERY), "--truth-stamps", *flags)


def _run(server, tmp_path, rule: str, transport: str, *flags: str) -> tuple[dict, list[dict], dict]:
    """One loadgen run under `rule`: its results JSON, its records and the server's write times."""
    prefix = f"{rule}-{transport}-{len(list(tmp_path.iterdir()))}-"
    out, recs = tmp_path / f"{prefix}r.json", tmp_path / f"{prefix}r.jsonl"
    rc = main(["--base-url", server.base_url, "--num-prompts", str(NUM_PROMPTS), "--concurrency", "2",
               "--random-input-len", "8", "--random-output-len", str(NUM_TOKENS), "--quiet",
               "--no-server-metrics", "--transport", transport, "--token-events", rule,
               "--request-id-prefix", prefix, "--output", str(out), "--records", str(recs), *flags])
    assert rc == 0
    rows = [json.loads(line) for line in recs.read_text().splitlines()]
    truth = httpx.get(server.base_url + "/truth", timeout=10).json()
    return json.loads(out.read_text()), rows, {row["index"]: truth[f"{prefix}{row['index']}"] for row in rows}


def _stamps_ns(row: dict) -> list[int]:
    return [round(ms * MS) + row["clock_t0_ns"] for ms in row["chunk_ms"]]


def _check_stamps(stamps: list[int], written: list[int], transport: str) -> None:
    """Each stamp is its write's arrival: after it (1 ms for the clocks' conversion), and with kernel
    stamps within KERNEL_SLACK_MS of it (a third of the gap: the next write is far)."""
    for stamp, write in zip(stamps, written, strict=True):
        assert stamp >= write - MS
        if transport == "lean":
            assert stamp - write < KERNEL_SLACK_MS * MS


def _mean_gap_ms(stamps_per_request: list[list[int]]) -> float:
    spans = sum(s[-1] - s[0] for s in stamps_per_request)
    return spans / sum(len(s) - 1 for s in stamps_per_request) / MS


@pytest.mark.parametrize("transport", ["lean", "httpx"])
def test_loadgen_rule_takes_empty_text_events_and_its_itl_is_the_true_gap(start_server, tmp_path, transport):
    server = _server(start_server)
    data, rows, truth = _run(server, tmp_path, "loadgen", transport)
    for row in rows:
        assert len(row["chunk_ms"]) == NUM_TOKENS and row["num_empty_text_events"] == len(EMPTY)
        _check_stamps(_stamps_ns(row), truth[row["index"]], transport)
    assert data["token_event_rule"] == "loadgen" and data["num_empty_text_events"] == NUM_PROMPTS * len(EMPTY)
    rec = data["summary"]["output_tokens_reconciliation"]
    assert (rec["usage_minus_client"], rec["empty_text_events"], rec["empty_text_events_dropped"],
            rec["lost_or_unsent"]) == (0, NUM_PROMPTS * len(EMPTY), False, 0)
    assert server.stats()["num_empty_text_events_sent"] == NUM_PROMPTS * len(EMPTY)
    true_gap = _mean_gap_ms(list(truth.values()))
    assert data["mean_itl_ms"] == pytest.approx(_mean_gap_ms([_stamps_ns(r) for r in rows]), rel=1e-6)
    if transport == "lean":
        assert data["mean_itl_ms"] == pytest.approx(true_gap, abs=2 * KERNEL_SLACK_MS / (NUM_TOKENS - 1))


@pytest.mark.parametrize("transport", ["lean", "httpx"])
def test_sglang_rule_drops_them_and_merges_their_gaps(start_server, tmp_path, transport):
    server = _server(start_server)
    data, rows, truth = _run(server, tmp_path, "sglang", transport)
    for row in rows:
        assert len(row["chunk_ms"]) == len(WITH_TEXT) and row["num_empty_text_events"] == len(EMPTY)
        written = truth[row["index"]]
        _check_stamps(_stamps_ns(row), [written[i] for i in WITH_TEXT], transport)
    rec = data["summary"]["output_tokens_reconciliation"]
    dropped = NUM_PROMPTS * len(EMPTY)
    assert (rec["usage_minus_client"], rec["empty_text_events"], rec["empty_text_events_dropped"],
            rec["lost_or_unsent"]) == (dropped, dropped, True, 0)
    if transport == "lean":
        # The same span over fewer gaps: the mean ITL is the true gap x (tokens - 1) / (events - 1).
        stretched = _mean_gap_ms(list(truth.values())) * (NUM_TOKENS - 1) / (len(WITH_TEXT) - 1)
        assert data["mean_itl_ms"] == pytest.approx(stretched, abs=2 * KERNEL_SLACK_MS / (len(WITH_TEXT) - 1))


@pytest.mark.parametrize("transport", ["lean", "httpx"])
def test_vllm_rule_takes_every_event_with_choices_and_ttft_lands_on_the_role_chunk(start_server, tmp_path,
                                                                                  transport):
    # Chat: the role chunk (sent with the response head), every token, the finish chunk.
    server = _server(start_server)
    data, rows, truth = _run(server, tmp_path, "vllm", transport)
    for row in rows:
        stamps, written = _stamps_ns(row), truth[row["index"]]
        assert len(stamps) == NUM_TOKENS + 2 and row["num_empty_text_events"] == len(EMPTY)
        assert row["first_token_ms"] == row["chunk_ms"][0]
        _check_stamps(stamps[1:-1], written, transport)
        assert stamps[0] <= stamps[1] and stamps[-1] >= stamps[-2]
        assert row["client_output_tokens"] == NUM_TOKENS  # the role and finish chunks carry no token
    rec = data["summary"]["output_tokens_reconciliation"]
    assert (rec["usage_minus_client"], rec["empty_text_events"], rec["lost_or_unsent"]) == (
        0, NUM_PROMPTS * len(EMPTY), 0)


def test_vllm_rule_with_the_role_chunk_in_the_first_tokens_write(start_server, tmp_path):
    server = _server(start_server, "--role-chunk")
    _, rows, truth = _run(server, tmp_path, "vllm", "lean")
    for row in rows:
        stamps = _stamps_ns(row)
        assert len(stamps) == NUM_TOKENS + 2 and stamps[0] == stamps[1]  # one read holds both
        _check_stamps(stamps[1:-1], truth[row["index"]], "lean")
    _, rows, _ = _run(server, tmp_path, "loadgen", "lean")
    assert all(len(row["chunk_ms"]) == NUM_TOKENS for row in rows)


def test_completions_finish_chunk_is_a_token_event_only_under_the_vllm_rule(start_server, tmp_path):
    server = _server(start_server)
    for rule, num_events in (("loadgen", NUM_TOKENS), ("vllm", NUM_TOKENS + 1), ("sglang", len(WITH_TEXT))):
        data, rows, truth = _run(server, tmp_path, rule, "lean", "--backend", "openai-completions")
        for row in rows:
            assert len(row["chunk_ms"]) == num_events and row["num_empty_text_events"] == len(EMPTY), rule
        assert data["summary"]["output_tokens_reconciliation"]["lost_or_unsent"] == 0, rule
