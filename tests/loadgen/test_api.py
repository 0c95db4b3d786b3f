"""loadgen as a library, through the documented API only (loadgen/api.py, README "Python API"),
against the scripted test server."""

from __future__ import annotations

import json

import pytest

from loadgen import api


def _options(url: str) -> dict:
    return {"base-url": url, "concurrency": 2, "num-prompts": 6, "random-input-len": 8,
            "random-output-len": 5, "percentiles": [50, 99], "slo": {"ttft": 5000}}


def test_a_run_from_a_dict_gives_the_result_and_its_json(start_server):
    server = start_server("--ttft-ms", "2", "--gap-ms", "1")
    plan = api.plan_run(_options(server.base_url))
    assert plan.config.concurrency == 2 and plan.dataset.random_output_len == 5
    result = api.run(plan)
    data = api.result_json(plan, result)
    assert result.summary["completed"] == 6 and data["completed"] == 6
    assert data["flags"] == {"base-url": server.base_url, "concurrency": "2", "num-prompts": "6",
                             "random-input-len": "8", "random-output-len": "5",
                             "percentiles": "50,99", "slo": "ttft=5000"}
    assert json.loads(json.dumps(data))["p99_ttft_ms"] == data["p99_ttft_ms"]
    assert server.stats()["num_requests"] == 6


def test_flags_override_the_options_and_a_saved_result_replays(start_server, tmp_path):
    server = start_server("--ttft-ms", "2", "--gap-ms", "1")
    plan = api.plan_run(_options(server.base_url), ["--num-prompts", "4", "--output", str(tmp_path / "r.json")])
    assert plan.config.num_prompts == 4
    result = api.run(plan)
    first = api.result_json(plan, result)
    assert api.save(plan, result, first) == {"output": str(tmp_path / "r.json")}
    replay = api.plan_run(tmp_path / "r.json")
    assert replay.config == plan.config and replay.dataset == plan.dataset
    assert replay.args.output is None  # NOTE: output paths are not recorded: a replay never overwrites
    again = api.result_json(replay, api.run(replay))
    assert again["total_input_tokens"] == first["total_input_tokens"] and again["completed"] == 4


def test_a_sweep_from_a_dict_gives_the_sweep_json(start_server):
    server = start_server("--ttft-ms", "2", "--gap-ms", "1")
    plan = api.plan_sweep({**_options(server.base_url), "concurrency": [1, 2], "num-prompts": 4,
                           "quiet": True})
    data = api.sweep(plan, log=lambda line: None)
    assert data["kind"] == "sweep" and [p["value"] for p in data["points"]] == [1, 2]
    assert data["flags"]["concurrency"] == "1,2" and data["flags"]["quiet"] is True


@pytest.mark.parametrize("options, message", [
    ({"base-url": "http://127.0.0.1:9", "no-such-flag": 1}, "unknown option 'no-such-flag'"),
    ({"num-prompts": 0}, "--num-prompts"),
    ({"no-stream": "yes"}, "no-stream takes true or false"),
])
def test_bad_options_raise_a_usage_error(options, message):
    with pytest.raises(api.UsageError, match=message):
        api.plan_run(options)


def test_a_run_that_cannot_start_raises_setup_error():
    plan = api.plan_run({"base-url": "http://127.0.0.1:9", "num-prompts": 1, "concurrency": 1})
    with pytest.raises(api.SetupError, match="127.0.0.1:9"):
        api.run(plan)
