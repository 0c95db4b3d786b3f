"""The results JSON: strict JSON whatever the numbers (no NaN, no Infinity); the workload block."""

from __future__ import annotations

import json
import math
import shlex

from loadgen.cli import main
from loadgen.plan.config import RunConfig
from loadgen.plan.datasets import DatasetConfig
from loadgen.report.results import result_dict, save_result, write_json
from loadgen.run.runner import run


def test_non_finite_numbers_are_written_as_strict_json(tmp_path, strict_json):
    data = {"label": "x", "request_rate": math.inf, "summary": {"ttft_split": {"mean_ms": {"queue": math.nan}},
            "low": -math.inf, "values": [1.5, math.nan, (math.inf, 2)]}}
    path = tmp_path / "r.json"
    write_json(str(path), data)
    saved = save_result(data, str(tmp_path), "s.json", append=False)
    for text in (path.read_text(), (tmp_path / "s.json").read_text()):
        assert strict_json(text) == {"label": "x", "request_rate": "inf", "summary": {
            "ttft_split": {"mean_ms": {"queue": None}}, "low": "-inf", "values": [1.5, None, ["inf", 2]]}}
    assert saved == str(tmp_path / "s.json")


WORKLOAD_KEYS = {"command", "dataset", "convention", "token_event_rule", "input_tokens", "output_tokens", "mode",
                 "concurrency", "request_rate", "num_prompts", "duration_s", "warmup", "stamps", "machine"}


def test_the_run_json_says_what_ran_as_a_command_that_replays_it(start_server, tmp_path):
    server = start_server("--ttft-ms", "2", "--gap-ms", "1", "--num-tokens", "5")
    out = tmp_path / "r.json"
    argv = ["--base-url", server.base_url, "--quiet", "--concurrency", "2", "--num-prompts", "6", "--warmup", "2",
            "--random-input-len", "16", "--random-output-len", "5", "--label", "two words",
            "--header", "Authorization: Bearer s3cret", "--output", str(out)]
    assert main(argv) == 0
    work = json.loads(out.read_text())["workload"]
    assert set(work) == WORKLOAD_KEYS
    assert "s3cret" not in work["command"]
    replay = shlex.split(work["command"])
    assert replay[0] == "loadgen" and replay[1:] == [a.replace("Bearer s3cret", "REDACTED") for a in argv]
    assert (work["dataset"], work["convention"], work["token_event_rule"]) == ("random", "sglang", "loadgen")
    assert (work["mode"], work["concurrency"], work["request_rate"]) == ("concurrency", 2, None)
    assert (work["num_prompts"], work["duration_s"], work["warmup"]) == (6, None, 2)
    assert work["output_tokens"] == {"mean": 5.0, "min": 5, "max": 5}  # the scripted server's usage
    lens = work["input_tokens"]
    assert 1 <= lens["min"] <= lens["mean"] <= lens["max"] <= 16
    assert work["stamps"] in ("kernel", "loop", "mixed")
    m = work["machine"]
    assert m["cpu_count"] >= m["usable_cores"] >= 1 and m["platform"] and m["load_avg_1m"] >= 0


def test_a_library_run_has_its_workload_without_a_command(start_server):
    server = start_server("--ttft-ms", "2", "--gap-ms", "1", "--num-tokens", "3")
    cfg = RunConfig(base_url=server.base_url, concurrency=1, num_prompts=2, server_metrics=False)
    result = run(cfg, DatasetConfig(name="random", random_input_len=8, random_output_len=3))
    work = result_dict(result, {"name": "random", "convention": "vllm"})["workload"]
    assert work["command"] is None and work["convention"] == "vllm" and work["num_prompts"] == 2
    assert work["output_tokens"] == {"mean": 3.0, "min": 3, "max": 3}
