"""`loadgen --config FILE` and `loadgen sweep --config FILE`: YAML or JSON options (keys the long flag
names), flags overriding them, and a results JSON replaying its run."""

from __future__ import annotations

import json
import subprocess
import sys

from loadgen import api
from loadgen.cli import main

YAML = """\
# a team's benchmark definition
base-url: {url}
max-concurrency: 2          # an alias is a long flag name too
num-prompts: 5
random-input-len: 8
random-output-len: 4
percentiles: [50, 99]
extra-request-body: {{"top_p": 0.5}}
header: ["X-Team: bench", "Authorization: Bearer s3cret"]
quiet: true
"""


def _yaml(tmp_path, url: str):
    path = tmp_path / "bench.yaml"
    path.write_text(YAML.format(url=url))
    return path


def test_a_run_from_a_yaml_file_records_its_flags_and_flags_override_it(start_server, tmp_path):
    server = start_server("--ttft-ms", "2", "--gap-ms", "1")
    out = tmp_path / "run.json"
    rc = main(["--config", str(_yaml(tmp_path, server.base_url)), "--num-prompts", "3", "--output", str(out)])
    data = json.loads(out.read_text())
    assert rc == 0 and data["completed"] == 3 and data["max_concurrency"] == 2
    assert data["config"]["extra_body"] == {"top_p": 0.5}
    assert data["flags"]["num-prompts"] == "3" and data["flags"]["concurrency"] == "2"
    assert data["flags"]["header"] == ["X-Team: bench", "Authorization: REDACTED"]
    assert "output" not in data["flags"]


def test_loadgen_config_run_json_replays_the_same_workload(start_server, tmp_path):
    server = start_server("--ttft-ms", "2", "--gap-ms", "1")
    first, again = tmp_path / "first.json", tmp_path / "again.json"
    assert main(["--base-url", server.base_url, "--concurrency", "2", "--num-prompts", "4", "--seed", "7",
                 "--random-input-len", "9", "--random-output-len", "3", "--quiet", "--output", str(first)]) == 0
    assert main(["--config", str(first), "--output", str(again)]) == 0
    a, b = json.loads(first.read_text()), json.loads(again.read_text())
    assert a["flags"] == b["flags"] and b["completed"] == 4
    assert a["config"] == b["config"] and a["dataset"]["seed"] == b["dataset"]["seed"] == 7
    assert a["total_input_tokens"] == b["total_input_tokens"]
    assert json.loads(first.read_text()) == a  # NOTE: the replay did not write over the file it read


def test_a_sweep_from_a_json_file(start_server, tmp_path):
    server = start_server("--ttft-ms", "2", "--gap-ms", "1")
    config, out = tmp_path / "sweep.json", tmp_path / "sweep-out.json"
    config.write_text(json.dumps({"base-url": server.base_url, "concurrency": [1, 2], "num-prompts": 3,
                                  "random-input-len": 8, "random-output-len": 4, "quiet": True}))
    assert main(["sweep", "--config", str(config), "--output", str(out)]) == 0
    data = json.loads(out.read_text())
    assert [p["value"] for p in data["points"]] == [1, 2] and data["flags"]["concurrency"] == "1,2"


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "loadgen", *args], capture_output=True, text=True, timeout=120)


def test_bad_config_files_are_one_line_usage_errors(tmp_path):
    unknown, broken, scalar = tmp_path / "unknown.yaml", tmp_path / "broken.yaml", tmp_path / "scalar.yaml"
    unknown.write_text("num-prompts: 3\nconcurency: 2\n")
    broken.write_text("num-prompts: [3\n")
    scalar.write_text("just text\n")
    for path, said in ((unknown, "unknown option 'concurency'"), (broken, "cannot read config file"),
                       (scalar, "expected a mapping of flag names"),
                       (tmp_path / "missing.yaml", "cannot read config file")):
        proc = _cli("--config", str(path))
        assert proc.returncode == 2, proc.stderr
        assert said in proc.stderr and "Traceback" not in proc.stderr


def test_an_abbreviated_config_flag_is_refused(tmp_path):
    proc = _cli("--conf", str(tmp_path / "x.yaml"))
    assert proc.returncode == 2 and "spell --config out in full" in proc.stderr


def test_repeatable_flags_of_a_later_layer_replace_the_earlier_ones(tmp_path):
    options = {"base-url": ["http://127.0.0.1:1", "http://127.0.0.1:2=3"], "model": ["a", "b=2"],
               "server-metrics-url": "http://127.0.0.1:9/metrics", "header": "X-A: 1"}
    (tmp_path / "run.json").write_text(json.dumps({"base-url": "http://127.0.0.1:3", "model": "c"}))
    plan = api.plan_run(options, ["--config", str(tmp_path / "run.json"), "--header", "X-B: 2",
                                  "--server-metrics-url", "http://127.0.0.1:8/metrics"])
    cfg = plan.config
    assert (cfg.base_url, cfg.base_urls, cfg.model, cfg.models) == ("http://127.0.0.1:3", (), "c", ())
    assert cfg.metrics_urls == ("http://127.0.0.1:8/metrics",)
    assert list(cfg.headers) == ["X-A", "X-B"]  # headers add up, layer after layer
    kept = api.plan_run(options, ["--num-prompts", "2"]).config
    assert kept.base_urls == (("http://127.0.0.1:1", 1.0), ("http://127.0.0.1:2", 3.0))
    assert kept.models == (("a", 1.0), ("b", 2.0))
