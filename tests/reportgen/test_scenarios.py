"""Scenario definitions: scaling, validation, and the forms each scenario starts."""

from __future__ import annotations

import pytest

from harness.load import Load
from reportgen.scenarios import SCENARIOS, SMALLEST_SCALE, scaled


def test_scaled_shrinks_but_keeps_the_floor():
    assert scaled(2048, 1.0, 8) == 2048
    assert scaled(2048, 0.5, 8) == 1024
    assert scaled(2048, 0.001, 8) == 8


@pytest.mark.parametrize("field, value", [("concurrency", 0), ("output_len", -1), ("range_ratio", 0.0),
                                          ("range_ratio", 1.5)])
def test_load_rejects_bad_values(field, value):
    kwargs = {"concurrency": 4, "num_prompts": 4, "input_len": 16, "output_len": 16, field: value}
    with pytest.raises(ValueError, match=field):
        Load(**kwargs)


def test_load_gives_loadgen_flags():
    args = Load(4, 8, 16, 32, 0.8).loadgen_args()
    assert args[args.index("--concurrency") + 1] == "4"
    assert args[args.index("--random-range-ratio") + 1] == "0.8"
    assert "--ignore-eos" in args


def test_a_dataset_replaces_the_random_prompts():
    args = Load(4, 8, 16, 32, seed=3, dataset=("--dataset", "custom"), extra=("--model", "m")).loadgen_args()
    assert "--random-input-len" not in args and args[-2:] == ["--model", "m"]
    assert args[args.index("--dataset") + 1] == "custom" and args[args.index("--seed") + 1] == "3"


def test_only_the_torch_scenario_measures_the_torch_engine():
    assert SCENARIOS["torch"].fingerprint_excludes == ()
    assert all(s.fingerprint_excludes for name, s in SCENARIOS.items() if name != "torch")


@pytest.mark.parametrize("scale", [0.0, SMALLEST_SCALE / 2, 1.5])
def test_scale_out_of_range_is_refused(scale):
    with pytest.raises(ValueError, match="scale"):
        SCENARIOS["storm"].runs(scale)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
@pytest.mark.parametrize("scale", [SMALLEST_SCALE, 1.0])
def test_run_names_are_unique_and_first_run_is_a_baseline(name, scale):
    runs = SCENARIOS[name].runs(scale)
    assert len({r.name for r in runs}) == len(runs)
    assert runs[0].name in ("all-legacy", "c16-r1.0-delayer-off", "c2-r1.0-delayer-off")


def test_default_scale_matches_the_issue():
    storm = SCENARIOS["storm"].runs(1.0)
    assert storm[0].load.concurrency == 2048 and "--all-legacy" in storm[0].flags
    assert all(r.flags[:2] == ("--disaggregation-mode", "decode") for r in storm)
    forms = {"all-legacy", "all-optimized", "H1-legacy-only", "H2-legacy-only"}
    assert {r.name for r in storm} == forms | {f"{f}-no-yield" for f in forms}
    for run in storm:
        recv = run.flags[run.flags.index("--ipc-recv") + 1]
        assert recv == run.params["ipc_recv"] == ("no-yield" if run.name.endswith("-no-yield") else "yield")
    long_output = [r for r in SCENARIOS["long-output"].runs(1.0) if not r.params.get("sweep")]
    assert {r.load.output_len for r in long_output} == {16384}
    assert not any("--incremental-streaming-output" in r.flags for r in long_output[:4])
    assert SCENARIOS["long-prompt"].runs(1.0)[0].load.input_len == 22_100  # ~100K server tokens
    osl = SCENARIOS["osl-variance"].runs(1.0)
    assert {r.params["concurrency"] for r in osl} == {16, 64, 128}
    assert {r.load.range_ratio for r in osl} == {1.0, 0.8}
    assert all("--prefill-delayer-queue-min-ratio" in r.flags for r in osl if r.params["delayer"] == "queue-trigger")
    assert all("--enable-dp-attention" in r.flags for r in osl)
    torch = SCENARIOS["torch"].runs(1.0)
    assert all(r.flags[:4] == ("--engine", "torch", "--device", "auto") for r in torch)


def test_long_output_sweep_runs_each_form_at_shorter_lengths():
    runs = SCENARIOS["long-output"].runs(1.0)
    sweep = [r for r in runs if r.params.get("sweep")]
    assert {r.params["form"] for r in sweep} == {"all-legacy", "all-optimized"}
    assert sorted({r.load.output_len for r in sweep}) == [2048, 4096, 8192]


def test_title_states_the_sizes_actually_run():
    storm = SCENARIOS["storm"]
    assert storm.title().startswith("2048-stream streaming-chat storm, 128/128 tokens")
    small = storm.title(0.01)
    assert small.startswith("20-stream") and "scale 0.01 of the default" in small
    assert "2048" not in small
