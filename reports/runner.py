"""Run a scenario: per form, start the server, profile its processes under load, then write the report."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import httpx

from reference_impl.placement import Placement
from reference_impl.subprocess_server import ServerProcess, cpu_seconds
from reports import analysis
from reports.profiler import ProfilerError, Recorder, find_py_spy, gzip_file, read_stacks
from reports.scenarios import Run, Scenario

PROCESSES = ("http", "scheduler", "detokenizer")
LOADGEN_TIMEOUT_S = 3600


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

    @property
    def loadgen_workers(self) -> str:
        """One loadgen worker per client CPU when pinned; else loadgen decides."""
        return str(self.placement.num_client_cpus) if self.placement else "auto"


@dataclass
class RunOutcome:
    """What one run produced: loadgen results, stacks and CPU seconds per process, server metrics."""

    run: Run
    result: dict
    stacks: dict[str, Counter]
    cpu_s: dict[str, float]
    metrics: dict[str, float]
    derived: dict


def scrape_metrics(url: str) -> dict[str, float]:
    """The scheduler counters from ``/metrics``: prefill/decode steps and delayer outcomes by reason."""
    text = httpx.get(url + "/metrics", timeout=30).text
    wanted = ("reference:num_prefill_steps", "reference:num_decode_steps",
              "reference:prefill_delayer_outcomes", "reference:generation_tokens_total")
    metrics: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith(wanted):
            key, _, value = line.rpartition(" ")
            metrics[key.removeprefix("reference:")] = float(value)
    return metrics


def _server_failure(run: Run, log: Path, error: Exception) -> ReportError:
    tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
    return ReportError(f"server for {run.name!r} (flags: {' '.join(run.flags) or 'none'}) failed: "
                       f"{str(error)[:500]}\n--- server log tail ---\n{tail}")


def _loadgen(run: Run, url: str, out: Path, records: Path, settings: Settings) -> dict:
    cmd = [sys.executable, "-m", "loadgen", "--base-url", url, *run.load.loadgen_args(),
           "--workers", settings.loadgen_workers, "--output", str(out), "--records", str(records),
           "--quiet", "--no-server-tokenize"]
    # NOTE: no /tokenize calibration: its calls would land in the profiled CPU window, and the
    # scenarios define their prompt sizes in loadgen's estimated tokens (see scenarios.py).
    preexec = settings.placement.client_preexec() if settings.placement else None
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=LOADGEN_TIMEOUT_S,
                          preexec_fn=preexec)
    if proc.returncode != 0 or not out.exists():
        raise ReportError(f"loadgen for {run.name!r} exited with {proc.returncode}: "
                          f"{(proc.stderr or proc.stdout)[-1500:]}")
    result = json.loads(out.read_text())
    if not result.get("completed"):
        errors = json.dumps(result.get("summary", {}).get("errors"))[:1000]
        raise ReportError(f"loadgen for {run.name!r}: no request completed; errors: {errors}")
    return result


def _under_load(run: Run, server: ServerProcess, settings: Settings, tmp: Path) -> RunOutcome:
    try:
        server.warm_up()
    except RuntimeError as error:
        raise ReportError(str(error)) from error
    pids = server.child_pids()
    if set(pids) != set(PROCESSES):
        raise ReportError(f"server for {run.name!r}: expected processes {PROCESSES}, found {pids}")
    server.pin()
    recorder = Recorder(settings.py_spy, pids, tmp / "raw", run.name, settings.rate, settings.duration,
                        settings.placement.client_preexec() if settings.placement else None)
    cpu_before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    recorder.start()
    try:
        records = tmp / "raw" / f"{run.name}.records.jsonl"
        result = _loadgen(run, server.url, tmp / "results" / f"{run.name}.json", records, settings)
        cpu_s = {name: cpu_seconds(pid) - cpu_before[name] for name, pid in pids.items()}
        paths = recorder.stop()
    finally:
        recorder.kill()
    if server.proc.poll() is not None:
        raise ReportError(f"server for {run.name!r} exited during the load")
    metrics = scrape_metrics(server.url)
    derived = analysis.from_records(records)
    records.unlink()
    stacks = {name: read_stacks(path) for name, path in paths.items()}
    for path in paths.values():
        gzip_file(path)
    return RunOutcome(run, result, stacks, cpu_s, metrics, derived)


def run_one(run: Run, settings: Settings, tmp: Path) -> RunOutcome:
    """Start the server in ``run``'s form, profile it under ``run``'s load, stop it."""
    log = tmp / "raw" / f"{run.name}.server.log"
    print(f"== {run.name}: server {' '.join(run.flags) or '(defaults)'}", flush=True)
    try:
        server = ServerProcess(*run.flags, *settings.server_flags, log_path=str(log),
                               placement=settings.placement)
        server.wait_ready()
    except (RuntimeError, TimeoutError, OSError) as error:
        raise _server_failure(run, log, error) from error
    try:
        outcome = _under_load(run, server, settings, tmp)
    finally:
        server.stop()
    print(f"   {outcome.result['output_throughput']:.0f} output tok/s, "
          f"{outcome.result['completed']} ok / {outcome.result['failed']} failed", flush=True)
    return outcome


def _replace_dir(src: Path, dst: Path) -> None:
    old = None
    if dst.exists():
        old = dst.with_name(f".{dst.name}.old-{os.getpid()}")
        dst.rename(old)
    src.rename(dst)
    if old:
        shutil.rmtree(old)


def run_scenario(scenario: Scenario, scale: float = 1.0, out_dir: Path | None = None,
                 rate: int = 100, duration: float | None = None, py_spy: str | None = None,
                 server_flags: tuple[str, ...] = (), placement: Placement | None = None) -> Path:
    """Run every form of ``scenario`` and write its report to ``out_dir`` (default reports/<name>).

    The report is built in a temporary directory beside ``out_dir`` and moved into place only
    when complete; on any failure nothing is left behind and ``ReportError`` says why.
    """
    from reports.render import write_report

    try:
        settings = Settings(find_py_spy(py_spy), rate, duration, tuple(server_flags), placement)
    except ProfilerError as error:
        raise ReportError(str(error)) from error
    out_dir = Path(out_dir or Path(__file__).parent / scenario.name).resolve()
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    try:
        for sub in ("raw", "results", "profiles", "flamegraphs"):
            (tmp / sub).mkdir()
        started = time.time()
        outcomes = [run_one(run, settings, tmp) for run in scenario.runs(scale)]
        write_report(scenario, scale, settings, outcomes, tmp, time.time() - started)
        _replace_dir(tmp, out_dir)
    except ProfilerError as error:
        shutil.rmtree(tmp, ignore_errors=True)
        raise ReportError(str(error)) from error
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out_dir
