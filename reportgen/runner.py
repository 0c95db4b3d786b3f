"""Run a scenario: each form through the experiment harness with py-spy on, then write the report."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from harness import Profiling, RunError, run_under_load
from harness.profiler import ProfilerError, find_py_spy, gzip_file, read_stacks
from loadgen.measure.prometheus import Metrics
from reference_impl.placement import Placement
from reportgen import analysis, output
from reportgen.render import write_report
from reportgen.scenarios import Run, Scenario

#: The scheduler counters a report keeps from ``/metrics``.
COUNTERS = ("reference:num_prefill_steps", "reference:num_decode_steps",
            "reference:generation_tokens_total")


class ReportError(RuntimeError):
    """A report could not be made (py-spy missing, a server or loadgen failed); nothing was written."""


@dataclass(frozen=True)
class Settings:
    """How to profile: py-spy path, sampling rate (Hz), recording duration, extra flags, placement."""

    py_spy: str
    rate: int = 100
    duration: float | None = None
    server_flags: tuple[str, ...] = ()
    placement: Placement | None = None


@dataclass
class RunOutcome:
    """What one run produced: loadgen results, stacks and CPU seconds per process, server metrics."""

    run: Run
    result: dict
    stacks: dict[str, Counter]
    cpu_s: dict[str, float]
    metrics: dict[str, float]
    derived: dict


def counters(metrics: Metrics) -> dict[str, float]:
    """The scheduler counters and the prefill delayer's outcomes by reason, as flat keys."""
    kept = {name.removeprefix("reference:"): metrics.value(name) for name in COUNTERS}
    for labels, value in metrics.series("reference:prefill_delayer_outcomes"):
        kept[f'prefill_delayer_outcomes{{reason="{labels.get("reason")}"}}'] = value
    return kept


def run_one(run: Run, settings: Settings, tmp: Path) -> RunOutcome:
    """Start the server in ``run``'s form, profile it under ``run``'s load, stop it."""
    print(f"== {run.name}: server {' '.join(run.form.flags) or '(defaults)'}", flush=True)
    profiling = Profiling(settings.py_spy, settings.rate, settings.duration)
    try:
        measured = run_under_load(run.form, run.load, tmp / "raw", placement=settings.placement,
                                  profiling=profiling, server_flags=settings.server_flags)
    except RunError as error:
        raise ReportError(str(error)) from error
    (tmp / "raw" / f"{run.name}.json").rename(tmp / "results" / f"{run.name}.json")
    derived = analysis.from_records(measured.records)
    derived["tokens_per_chunk"] = measured.tokens_per_chunk
    measured.records.unlink()
    stacks = {name: read_stacks(path) for name, path in measured.profiles.items()}
    for path in measured.profiles.values():
        gzip_file(path)
    result = measured.loadgen
    print(f"   {result['output_throughput']:.0f} output tok/s, "
          f"{result['completed']} ok / {result['failed']} failed", flush=True)
    return RunOutcome(run, result, stacks, measured.cpu_s, counters(measured.metrics), derived)


def run_scenario(scenario: Scenario, scale: float = 1.0, out_dir: Path | None = None,
                 rate: int = 100, duration: float | None = None, py_spy: str | None = None,
                 server_flags: tuple[str, ...] = (), placement: Placement | None = None) -> Path:
    """Run every form of ``scenario`` and write its report to ``out_dir`` (see ``output.default_dir``).

    ``out_dir`` is checked before any load runs (``output.check``); the report is built in a
    temporary directory beside it and moved into place only when complete, so on any failure
    nothing is left behind and ``ReportError`` says why.
    """
    out_dir = Path(out_dir) if out_dir else output.default_dir(scenario.name, scale)
    try:
        output.check(out_dir, scenario.name, scale)
        settings = Settings(find_py_spy(py_spy), rate, duration, tuple(server_flags), placement)
    except (output.OutputError, ProfilerError) as error:
        raise ReportError(str(error)) from error
    out_dir = out_dir.resolve()
    try:
        with output.staging(out_dir, scenario.name, scale) as tmp:
            for sub in ("raw", "results", "profiles", "flamegraphs"):
                (tmp / sub).mkdir()
            started = time.time()
            outcomes = [run_one(run, settings, tmp) for run in scenario.runs(scale)]
            write_report(scenario, scale, settings, outcomes, tmp, time.time() - started)
    except ProfilerError as error:
        raise ReportError(str(error)) from error
    return out_dir
