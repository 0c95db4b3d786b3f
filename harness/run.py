"""The one way to run an experiment: the server in a form, loadgen against it, and the readings.

``run_under_load(form, load, out_dir)`` starts the reference server in ``form`` (pinned when a
placement is given), warms it up, runs loadgen (optionally with py-spy on every server process),
reads each process's CPU time and ``/metrics``, stops the server and returns a ``RunResult``.
``run_loadgen`` is its client half, for servers started elsewhere (vLLM, a scripted server).
Files land in ``out_dir`` as ``<form>.json`` (loadgen), ``<form>.records.jsonl``,
``<form>.server.log`` and, when profiled, ``<form>.<process>.txt`` (py-spy raw stacks).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from harness.forms import Form
from harness.load import Load
from harness.profiler import Recorder
from loadgen.measure.prometheus import Metrics, scrape
from reference_impl.placement import Placement
from reference_impl.subprocess_server import ServerProcess, cpu_seconds

PROCESSES = ("http", "scheduler", "detokenizer")
LOADGEN_TIMEOUT_S = 3600


class RunError(RuntimeError):
    """An experiment could not be run (the server or loadgen failed); the message says which."""


@dataclass(frozen=True)
class Profiling:
    """py-spy settings: executable, sampling rate (Hz), recording duration (None: the whole load)."""

    py_spy: str
    rate: int = 100
    duration: float | None = None


@dataclass
class RunResult:
    """One run's readings: loadgen's JSON, CPU seconds per server process, server metrics."""

    form: Form
    load: Load
    loadgen: dict
    cpu_s: dict[str, float]
    metrics: Metrics
    server_log: Path
    records: Path | None = None
    profiles: dict[str, Path] = field(default_factory=dict)

    @property
    def output_tokens(self) -> int:
        return self.loadgen.get("total_output_tokens") or 0

    @property
    def http_cpu_us_per_token(self) -> float | None:
        """The HTTP process's CPU per output token (µs): where H1, H2, H3 and H6 run."""
        return self.cpu_s["http"] * 1e6 / self.output_tokens if self.output_tokens else None

    @property
    def tokens_per_chunk(self) -> float | None:
        """Output tokens (server usage) per SSE content chunk the client received."""
        return tokens_per_chunk(self.records) if self.records else None


def tokens_per_chunk(records: Path) -> float | None:
    """Sum of usage completion tokens over the sum of content chunks, from a ``--records`` file."""
    tokens = chunks = 0
    with open(records) as f:
        for line in f:
            record = json.loads(line)
            if record.get("ok", True) and record.get("usage_completion_tokens") is not None:
                tokens += record["usage_completion_tokens"]
                chunks += len(record.get("chunk_ms") or ())
    return tokens / chunks if chunks else None


def run_loadgen(url: str, load: Load, output: Path, *, records: Path | None = None,
                workers: str = "auto", flags: tuple[str, ...] = (), quiet: bool = True,
                preexec_fn: Callable[[], None] | None = None, cwd: str | None = None,
                timeout: float = LOADGEN_TIMEOUT_S) -> dict:
    """Run ``python -m loadgen`` against ``url`` (from ``cwd``'s loadgen when given); its JSON."""
    cmd = [sys.executable, "-m", "loadgen", "--base-url", url, *load.loadgen_args(),
           "--workers", workers, "--output", str(output), *flags]
    if records:
        cmd += ["--records", str(records)]
    if quiet:
        cmd.append("--quiet")
    proc = subprocess.run(cmd, capture_output=quiet, text=True, timeout=timeout,
                          preexec_fn=preexec_fn, cwd=cwd)
    if proc.returncode != 0 or not output.exists():
        detail = (proc.stderr or proc.stdout or "")[-1500:] if quiet else "(see above)"
        raise RunError(f"loadgen exited with {proc.returncode}: {detail}")
    return json.loads(output.read_text())


def run_under_load(form: Form, load: Load, out_dir: Path, *, placement: Placement | None = None,
                   profiling: Profiling | None = None, server_flags: tuple[str, ...] = (),
                   quiet: bool = True) -> RunResult:
    """Start the server in ``form``, drive ``load`` through it, read it, stop it."""
    out_dir.mkdir(parents=True, exist_ok=True)
    log = out_dir / f"{form.name}.server.log"
    try:
        server = ServerProcess(*form.flags, *server_flags, log_path=str(log), placement=placement)
        server.wait_ready()
    except (RuntimeError, TimeoutError, OSError) as error:
        raise _server_failure(form, server_flags, log, error) from error
    try:
        return _measure(form, load, server, out_dir, log, placement, profiling, quiet)
    finally:
        server.stop()


def _measure(form: Form, load: Load, server: ServerProcess, out_dir: Path, log: Path,
             placement: Placement | None, profiling: Profiling | None, quiet: bool) -> RunResult:
    try:
        server.warm_up()
    except RuntimeError as error:
        raise RunError(f"server for {form.name!r}: {error}") from error
    pids = server.child_pids()
    if set(pids) != set(PROCESSES):
        raise RunError(f"server for {form.name!r}: expected processes {PROCESSES}, found {pids}")
    server.pin()
    preexec = placement.client_preexec() if placement else None
    recorder = (Recorder(profiling.py_spy, pids, out_dir, form.name, profiling.rate,
                         profiling.duration, preexec) if profiling else None)
    records = out_dir / f"{form.name}.records.jsonl"
    cpu_before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    try:
        if recorder:
            recorder.start()
        workers = str(placement.num_client_cpus) if placement else "auto"
        result = run_loadgen(server.url, load, out_dir / f"{form.name}.json", records=records,
                             workers=workers, flags=("--no-server-tokenize",), quiet=quiet,
                             preexec_fn=preexec)
        cpu_s = {name: cpu_seconds(pid) - cpu_before[name] for name, pid in pids.items()}
        profiles = recorder.stop() if recorder else {}
    except RunError as error:
        raise RunError(f"{form.name}: {error}") from error
    finally:
        if recorder:
            recorder.kill()
    # NOTE: --no-server-tokenize keeps loadgen's /tokenize calls out of the measured CPU window.
    if server.proc.poll() is not None:
        raise RunError(f"server for {form.name!r} exited during the load")
    if not result.get("completed"):
        errors = json.dumps(result.get("summary", {}).get("errors"))[:1000]
        raise RunError(f"{form.name}: no request completed; errors: {errors}")
    return RunResult(form, load, result, cpu_s, scrape(server.url), log, records, profiles)


def _server_failure(form: Form, server_flags: tuple[str, ...], log: Path, error: Exception) -> RunError:
    tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
    flags = " ".join((*form.flags, *server_flags)) or "none"
    return RunError(f"server for {form.name!r} (flags: {flags}) failed: {str(error)[:500]}\n"
                    f"--- server log tail ---\n{tail}")
