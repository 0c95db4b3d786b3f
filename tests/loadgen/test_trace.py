"""Trace replay: mooncake lines sent at their timestamps, hash ids as shared prompt blocks, BurstGPT
timestamps, bad lines named."""

from __future__ import annotations

import json
import subprocess
import sys
import tracemalloc
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from loadgen.flags import build_parser, config_from_args
from loadgen.plan.config import RunConfig
from loadgen.plan.datasets import DatasetConfig, build_prompts
from loadgen.plan.lengths import probe_server
from loadgen.run.runner import SetupError, run
from loadgen.selftest.scripted_stream import MAX_MODEL_LEN

#: (timestamp ms, hash ids): irregular gaps, shared and distinct prefixes.
LINES = [(0, [0, 1]), (40, [0, 1]), (45, [0, 2]), (260, [3]), (300, [0, 1, 4]), (520, [])]
BLOCK = 8
# NOTE: a generous bound for a busy, shared machine (load 6+ on 2 cores can delay a wake-up by tens
# of ms); a quiet one sends within about 1 ms. The intended times themselves are checked exactly.
MAX_LATE_MS = 200.0


def _trace(tmp_path, lines=LINES) -> str:
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(json.dumps({"timestamp": ts, "input_length": 3 * BLOCK + 5, "output_length": 4,
                                        "hash_ids": ids}) + "\n" for ts, ids in lines))
    return str(path)


def _dcfg(path: str, **kw) -> DatasetConfig:
    return DatasetConfig(name="mooncake", dataset_path=path, num_prompts=None, block_size=BLOCK,
                         trace_timestamps=True, use_server_tokenize=False, **kw)


def _replay(server, path: str, speedup: float = 1.0, **kw):
    cfg = RunConfig(base_url=server.base_url, replay_trace=True, trace_speedup=speedup, num_prompts=None,
                    server_metrics=False, **kw)
    return run(cfg, _dcfg(path))


def test_replay_sends_each_request_at_its_trace_time_in_order(start_server, tmp_path):
    server = start_server("--ttft-ms", "5", "--gap-ms", "2", "--num-tokens", "4", "--log-requests")
    result = _replay(server, _trace(tmp_path))
    recs = result.records
    assert [r.index for r in recs] == list(range(len(LINES))) and result.summary["completed"] == len(LINES)
    t0 = min(r.intended_ns for r in recs)
    for r, (ts, _) in zip(recs, LINES, strict=True):
        assert (r.intended_ns - t0) / 1e6 == pytest.approx(ts, abs=0.01)
        assert 0 <= (r.start_ns - r.intended_ns) / 1e6 < MAX_LATE_MS, r
    assert [r.index for r in sorted(recs, key=lambda r: r.start_ns)] == list(range(len(LINES)))
    s = result.summary
    assert result.cfg.is_rate_mode and s["max_send_lag_ms"] < MAX_LATE_MS
    assert s["median_send_lag_ms"] <= s["p99_send_lag_ms"] <= s["max_send_lag_ms"]
    # the server got the trace's lengths and its shared blocks: the bodies as received
    bodies = [entry["body"] for entry in httpx.get(server.base_url + "/requests", timeout=10).json()]
    words = [b["messages"][0]["content"].split() for b in bodies]
    assert [b["max_tokens"] for b in bodies] == [4] * len(LINES)
    assert all(len(w) == 3 * BLOCK + 5 for w in words)
    assert words[0][:2 * BLOCK] == words[1][:2 * BLOCK] == words[4][:2 * BLOCK]
    assert words[0][2 * BLOCK:] != words[1][2 * BLOCK:]  # past the shared blocks: unique filler
    assert words[2][:BLOCK] == words[0][:BLOCK] and words[2][BLOCK:2 * BLOCK] != words[0][BLOCK:2 * BLOCK]


def test_trace_speedup_divides_the_offsets(start_server, tmp_path):
    server = start_server("--ttft-ms", "5", "--gap-ms", "2", "--num-tokens", "4")
    recs = _replay(server, _trace(tmp_path), speedup=4.0).records
    t0 = min(r.intended_ns for r in recs)
    assert [round((r.intended_ns - t0) / 1e6, 2) for r in recs] == [ts / 4 for ts, _ in LINES]
    assert all(0 <= (r.start_ns - r.intended_ns) / 1e6 < MAX_LATE_MS for r in recs)


def test_concurrency_caps_a_replay(start_server, tmp_path):
    server = start_server("--ttft-ms", "100", "--gap-ms", "2", "--num-tokens", "4")
    burst = [(0, [i]) for i in range(6)]
    result = _replay(server, _trace(tmp_path, burst), concurrency=2)
    assert result.summary["completed"] == 6 and result.summary["max_concurrent_requests"] == 2


def test_hash_ids_map_to_shared_blocks_and_num_prompts_takes_the_first_lines(tmp_path):
    path = _trace(tmp_path)
    prompts = build_prompts(_dcfg(path))
    assert [p.arrival_s for p in prompts] == [ts / 1e3 for ts, _ in LINES]
    assert all(p.input_len == 3 * BLOCK + 5 and p.output_len == 4 for p in prompts)
    assert build_prompts(_dcfg(path)) == prompts  # deterministic
    first = build_prompts(DatasetConfig(name="mooncake", dataset_path=path, num_prompts=2, block_size=BLOCK))
    assert [p.prompt for p in first] == [p.prompt for p in prompts[:2]] and first[0].arrival_s is None
    blocks = {}
    for p, (_, ids) in zip(prompts, LINES, strict=True):
        words = p.prompt.split()
        for k, hash_id in enumerate(ids[:3]):
            blocks.setdefault(hash_id, words[k * BLOCK:(k + 1) * BLOCK])
            assert words[k * BLOCK:(k + 1) * BLOCK] == blocks[hash_id]
    assert len({" ".join(b) for b in blocks.values()}) == len(blocks)  # distinct ids differ
    words = [p.prompt.split() for p in prompts]  # hash ids [0, 1] and [0, 2]: block 0 is BLOCK words
    assert words[2][:BLOCK] == words[0][:BLOCK] and words[2][BLOCK] != words[0][BLOCK]


def test_with_a_tokenizer_shared_blocks_are_block_size_tokens(tmp_path):
    from loadgen.plan.lengths import FileTokenizer

    tok_dir = str(Path(__file__).parent / "fixtures/upstream/tiny_llama")
    prompts = build_prompts(_dcfg(_trace(tmp_path), tokenizer_path=tok_dir))
    ids = [FileTokenizer(tok_dir).encode(p.prompt) for p in prompts]
    assert all(p.input_len == len(i) == 3 * BLOCK + 5 for p, i in zip(prompts, ids, strict=True))
    # hash ids [0, 1], [0, 1], [0, 2], [3], [0, 1, 4], []: a shared prefix ends at a block's last token
    assert ids[0][:2 * BLOCK] == ids[1][:2 * BLOCK] == ids[4][:2 * BLOCK]
    assert ids[0][2 * BLOCK] != ids[1][2 * BLOCK] and ids[0][2 * BLOCK] != ids[4][2 * BLOCK]
    assert ids[2][:BLOCK] == ids[0][:BLOCK] and ids[2][BLOCK] != ids[0][BLOCK]
    assert ids[3][0] != ids[0][0] and ids[5][0] != ids[0][0]


@pytest.mark.parametrize(("line", "says"), [
    ("{not json", "line 2 of"), ('{"timestamp": 5, "input_length": "x", "output_length": 3}', "'input_length'"),
    ('{"timestamp": 5, "input_length": 9, "output_length": 3, "hash_ids": [1, "a"]}', "'hash_ids'"),
    ('{"timestamp": -1, "input_length": 9, "output_length": 3}', "line 2 of"),
    *[(f'{{"timestamp": {ts}, "input_length": 9, "output_length": 3}}', "finite")
      for ts in ("NaN", "Infinity", "1e999")],
    ('{"timestamp": 1e300, "input_length": 9, "output_length": 3}', "MAX_TRACE_SPAN_S"),
    ('{"timestamp": 5, "input_length": 1000000000, "output_length": 3}', "MAX_TRACE_LEN"),
    ('{"timestamp": 5, "input_length": 9, "output_length": 1000000000}', "'output_length' 1000000000 is above"),
    ('{"timestamp": 1' + "0" * 400 + ', "input_length": 9, "output_length": 3}', "finite"),
    ('{"timestamp": 5, "input_length": 1' + "0" * 5000 + ', "output_length": 3}', "digit"),
    ("[" * 100_000 + "]" * 100_000, "RecursionError"),
], ids=lambda text: text[:48])
def test_a_malformed_line_is_a_setup_error_naming_it(tmp_path, line, says):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 9, "output_length": 3, "hash_ids": [1]}\n' + line + "\n")
    cfg = RunConfig(base_url="http://127.0.0.1:9", model="m", replay_trace=True, num_prompts=None)
    with pytest.raises(SetupError, match="line 2") as err:
        run(cfg, _dcfg(str(path)))
    assert says in str(err.value)


def test_cli_exits_1_on_a_bad_trace_and_2_on_bad_flags(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 9, "output_length": 3}\n{"timestamp": 10}\n')
    base = [sys.executable, "-m", "loadgen", "--base-url", "http://127.0.0.1:9", "--model", "m",
            "--no-server-tokenize", "--quiet", "--no-server-metrics"]
    done = subprocess.run([*base, "--dataset", "mooncake", "--dataset-path", str(path)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 1 and "line 2 of" in done.stderr and "output_length" not in done.stdout
    bad = subprocess.run([*base, "--dataset", "random", "--trace-speedup", "2", "--concurrency", "1"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--trace-speedup" in bad.stderr


def test_burstgpt_replays_its_timestamps_unless_a_rate_is_given(tmp_path):
    path = tmp_path / "burst.csv"
    path.write_text("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                    "5,GPT-4,12,30,42,Conversation log\n5.25,ChatGPT,500,20,520,Conversation log\n"
                    "6.5,GPT-4,25,5,30,API log\n9,GPT-4,40,7,47,API log\n")
    flags = ["--dataset", "burstgpt", "--dataset-path", str(path)]
    cfg, dcfg = config_from_args(build_parser().parse_args(flags))
    assert cfg.replay_trace and cfg.is_rate_mode and dcfg.trace_timestamps and dcfg.num_prompts is None
    prompts = build_prompts(dcfg)
    assert [(p.arrival_s, p.input_len, p.output_len) for p in prompts] == [(0.0, 12, 30), (1.5, 25, 5), (4.0, 40, 7)]
    cfg, dcfg = config_from_args(build_parser().parse_args([*flags, "--request-rate", "10"]))
    assert not cfg.replay_trace and not dcfg.trace_timestamps and cfg.num_prompts == 1000


def test_a_nan_timestamp_exits_1_naming_the_line_and_kills_no_worker(start_server, tmp_path):
    server = start_server("--ttft-ms", "5", "--gap-ms", "1", "--num-tokens", "4")
    path = tmp_path / "nan.jsonl"
    path.write_text("".join(f'{{"timestamp": {ts}, "input_length": 9, "output_length": 3}}\n'
                            for ts in ("0", "NaN", "20")))
    done = subprocess.run([sys.executable, "-m", "loadgen", "--base-url", server.base_url, "--model", "m",
                           "--no-server-tokenize", "--quiet", "--no-server-metrics", "--dataset", "mooncake",
                           "--dataset-path", str(path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "line 2 of" in done.stderr and "finite" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and "died" not in done.stderr


def test_lengths_are_bounded_by_the_context_the_server_reports(start_server, tmp_path):
    server = start_server("--ttft-ms", "5", "--gap-ms", "1", "--num-tokens", "4")
    tok, why = probe_server(server.base_url, {}, 30)
    assert tok is not None and tok.max_model_len == MAX_MODEL_LEN, why
    path = tmp_path / "long.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 40, "output_length": 3}\n'
                    f'{{"timestamp": 1, "input_length": {MAX_MODEL_LEN + 1}, "output_length": 3}}\n')
    try:
        assert [p.input_len for p in build_prompts(replace(_dcfg(str(path)), num_prompts=1), tok)] == [40]
        with pytest.raises(ValueError, match=f"line 2 of .*is above the model's context.*{MAX_MODEL_LEN}"):
            build_prompts(_dcfg(str(path)), tok)
    finally:
        tok.close()


def _peak_mib(build) -> float:
    tracemalloc.start()
    try:
        build()
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


def test_a_huge_block_size_builds_only_what_the_prompts_use(tmp_path):
    path = _trace(tmp_path)
    huge = replace(_dcfg(path), block_size=10**7)
    assert _peak_mib(lambda: build_prompts(huge)) < 20
    # a block longer than every prompt: each prompt is its first block's first words, whatever the size
    prompts = build_prompts(huge)
    same = build_prompts(replace(huge, block_size=3 * BLOCK + 5))
    assert prompts == same and prompts[0].prompt == prompts[2].prompt != prompts[3].prompt  # ids [0, 1], [0, 2], [3]


BURST_HEAD = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"


@pytest.mark.parametrize(("row", "says"), [
    ("nan,GPT-4,12,30,42,API log", "'Timestamp' must be a finite number"),
    ("inf,GPT-4,12,30,42,API log", "'Timestamp' must be a finite number"),
    ("1,GPT-4,12,inf,42,API log", "'Response tokens' must be a finite number"),
    ("1,GPT-4,nan,30,42,API log", "'Request tokens' must be a finite number"),
    ("1,GPT-4,1e9,30,42,API log", "'Request tokens' 1e9 is above loadgen's cap"),
    ("1,GPT-4,12,1000000000,42,API log", "'Response tokens' 1000000000 is above"),
    ("0.5,GPT-4,12,30,42,API log", "before the previous request's"),
    ("1e300,GPT-4,12,30,42,API log", "MAX_TRACE_SPAN_S"),
    ("1,GPT-4," + "9" * 200_000 + ",30,42,API log", "is not CSV"),  # past the csv module's field limit
], ids=lambda text: text[:48])
def test_a_bad_burstgpt_row_is_a_setup_error_naming_its_line(tmp_path, row, says):
    path = tmp_path / "burst.csv"
    path.write_text(BURST_HEAD + "1,GPT-4,12,30,42,API log\n" + row + "\n")
    cfg = RunConfig(base_url="http://127.0.0.1:9", model="m", replay_trace=True, num_prompts=None)
    dcfg = DatasetConfig(name="burstgpt", dataset_path=str(path), num_prompts=None, trace_timestamps=True,
                         use_server_tokenize=False)
    with pytest.raises(SetupError, match="line 3 of") as err:
        run(cfg, dcfg)
    assert says in str(err.value)


def test_burstgpt_is_read_as_far_as_needed_in_bounded_memory(tmp_path):
    path = tmp_path / "burst.csv"
    with path.open("w") as f:
        f.write(BURST_HEAD)
        f.writelines(f"{i / 100},GPT-4,{10 + i % 7},{5 + i % 3},1,API log\n" for i in range(200_000))
        f.write("nan,GPT-4,nan,nan,1,API log\n")  # never reached by a replay of the first rows
    replay = DatasetConfig(name="burstgpt", dataset_path=str(path), num_prompts=10, trace_timestamps=True)
    prompts = build_prompts(replay)
    assert [(p.arrival_s, p.input_len) for p in prompts] == [(pytest.approx(i / 100), 10 + i % 7) for i in range(10)]
    assert _peak_mib(lambda: build_prompts(replay)) < 5
    path.write_text(path.read_text().rsplit("nan,", 1)[0])  # sampling reads every row: drop the bad one
    sample = DatasetConfig(name="burstgpt", dataset_path=str(path), num_prompts=10)
    assert _peak_mib(lambda: build_prompts(sample)) < 5
    picked = build_prompts(sample)
    assert len(picked) == 10 and picked == build_prompts(sample) and picked != build_prompts(replace(sample, seed=2))
