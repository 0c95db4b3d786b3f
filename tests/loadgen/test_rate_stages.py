"""Piecewise request rate (`--request-rate-stages`, issue 32): the schedule follows the stages, flags
are checked, and the run reports the achieved rate per stage."""

from __future__ import annotations

import json

import numpy as np
import pytest

from loadgen.cli import main
from loadgen.flags import build_parser, config_from_args
from loadgen.plan.config import RunConfig
from loadgen.plan.schedule import stage_of, stage_offsets_s
from loadgen.report.html import render

STAGES = ((10.0, 3.0), (50.0, 2.0), (20.0, 1.0))


def _per_stage(offsets: list[float]) -> list[int]:
    counts = [0] * len(STAGES)
    for t in offsets:
        counts[stage_of(STAGES, t)] += 1
    return counts


def test_constant_gaps_give_each_stage_its_rate():
    offsets = stage_offsets_s(STAGES, float("inf"), None, seed=1)
    assert offsets[0] == 0.0 and offsets[-1] < 6.0 and offsets == sorted(offsets)
    assert _per_stage(offsets) == [30, 100, 20]
    assert np.allclose(np.diff(offsets[:30]), 0.1) and np.allclose(np.diff(offsets[31:130]), 0.02)


def test_poisson_stages_are_seeded_and_near_their_expected_counts():
    stages = ((400.0, 5.0), (100.0, 5.0))
    a = stage_offsets_s(stages, 1.0, None, seed=5)
    assert a == stage_offsets_s(stages, 1.0, None, seed=5) != stage_offsets_s(stages, 1.0, None, seed=6)
    first = sum(t < 5.0 for t in a)
    assert abs(first - 2000) < 4 * 2000 ** 0.5 and abs(len(a) - first - 500) < 4 * 500 ** 0.5
    assert stage_offsets_s(stages, 1.0, 7, seed=5) == a[:7]  # a cap keeps the same first times


@pytest.mark.parametrize(("argv", "match"), [
    (["--request-rate-stages", "10:30,5"], None),
    (["--request-rate-stages", "10:0"], None),
    (["--request-rate-stages", "10:30", "--request-rate", "5"], "replaces --request-rate"),
    (["--request-rate-stages", "10:30", "--duration", "5"], "drop --duration"),
])
def test_bad_stage_flags_are_usage_errors(argv, match):
    parser = build_parser()
    if match is None:
        with pytest.raises(SystemExit) as exc:
            parser.parse_args(argv)
        assert exc.value.code == 2
        return
    with pytest.raises(ValueError, match=match):
        config_from_args(parser.parse_args(argv))


def test_stages_alone_are_rate_mode_without_a_request_count():
    cfg, _ = config_from_args(build_parser().parse_args(["--request-rate-series", "10:3,20:1"]))
    assert cfg.rate_stages == ((10.0, 3.0), (20.0, 1.0)) and cfg.is_rate_mode and cfg.num_prompts is None
    with pytest.raises(ValueError, match="sets the duration"):
        RunConfig(rate_stages=((1.0, 1.0),), duration_s=3.0)


def test_run_reports_the_achieved_rate_per_stage(start_server, tmp_path, capsys):
    server = start_server("--ttft-ms", "2", "--gap-ms", "1")
    out = tmp_path / "r.json"
    rc = main(["--base-url", server.base_url, "--request-rate-stages", "20:1,60:0.5", "--burstiness", "inf",
               "--random-input-len", "16", "--random-output-len", "4", "--no-server-metrics", "--output", str(out)])
    assert rc == 0
    data = json.loads(out.read_text())
    rows = data["summary"]["rate_stages"]
    assert [(r["stage"], r["rate"], r["duration_s"], r["planned"]) for r in rows] == [(1, 20.0, 1.0, 20), (2, 60.0, 0.5, 30)]
    assert sum(r["sent"] for r in rows) == data["completed"] == 50
    assert all(r["achieved_rate"] == r["sent"] / r["duration_s"] for r in rows)
    printed = " ".join(capsys.readouterr().out.split())
    assert "stage 1 20.00 req/s for 1.00 s: planned 20, sent" in printed, printed
    page = render([data], ["staged"])
    assert "<td>stage 2: asked / achieved req/s (s)</td><td class='num'>60.00 / " in page
    plain = {**data, "summary": {k: v for k, v in data["summary"].items() if k != "rate_stages"}}
    assert "Prefix cache and rate stages" not in render([plain], ["plain"])  # no knob, no section


def test_stages_expecting_too_many_requests_are_refused_unless_capped():
    # Before: 2000:20000 ran out of memory (MemoryError at a 3 GB limit after 81 s) drawing the
    # arrival times, 1e9:1e9 ended in a numpy traceback; now one line, or only N times drawn.
    with pytest.raises(ValueError, match="expects 40,000,000 requests, more than 10,000,000"):
        config_from_args(build_parser().parse_args(["--request-rate-stages", "2000:20000"]))
    cfg, _ = config_from_args(build_parser().parse_args(["--request-rate-stages", "1e9:1e9", "--num-prompts", "5"]))
    assert len(stage_offsets_s(cfg.rate_stages, cfg.burstiness, cfg.num_prompts, cfg.seed)) == 5
