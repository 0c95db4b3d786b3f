"""Instruction counts of the hot paths under callgrind: deterministic where wall time is not.

    python -m benchmarks.instructions [--json OUT] [--only REGEX]

One callgrind process measures every case, so the interpreter and its imports are paid once:
it starts with instrumentation off (native-ish speed through the imports), builds and warms
every workload, turns instrumentation on (``callgrind_control -i on``), then for each case
freezes the heap (``gc.collect(); gc.freeze()``) and counts ``calls`` calls twice, each count
bracketed by ``torch._C._valgrind_toggle()`` and dumped on its own. The two counts must agree
within ``REPEAT_BOUND``; otherwise the case is reported non-deterministic and the run fails.

What is fixed so the count is a property of the code and nothing else: the interpreter binary
(``sys.executable``, never a pyenv shim), the hash seed (``PYTHONHASHSEED=0``), the address
layout (``setarch -R``), the environment (a short fixed one, so the stack starts at the same
address), one BLAS/OpenMP/torch thread, ``time.time`` and ``uuid.uuid4`` (seeded in the
child), and the workloads' data (seeded).

The asv ``track_`` benchmarks (``bench_instructions.py``) read these counts; ``asv continuous``
on them is the CI's count gate (``scripts/asv_ci.sh``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPEAT_BOUND = 0.01
"""Largest relative difference allowed between a case's two counts in one process."""
TIMEOUT_S = 900
_ENV_KEEP = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR")
_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS",
                "VECLIB_MAXIMUM_THREADS")


@dataclass(frozen=True)
class Case:
    """One counted region: ``calls`` calls of the workload ``build(form)`` returns."""

    name: str
    hot_path: str
    calls: int
    build: Callable[[str], Callable[[], object]]


def _h1(form: str):
    from benchmarks.bench_wakeups import h1_step

    return h1_step(form, 2048, 16)


def _h2(kind: str):
    def build(form: str):
        from benchmarks.workloads import ChunkEncoding, form_args

        return ChunkEncoding(form_args("H2", form), kind)
    return build


def _h3(form: str):
    from benchmarks.bench_stream_outputs import h3_stream

    return h3_stream(form, 1_000)


def _h4(stage: str):
    def build(form: str):
        from benchmarks.workloads import TokenLifecycle, form_args

        return TokenLifecycle(form_args("H4", form), 10_000, stage)
    return build


def _h5(form: str):
    from benchmarks.workloads.decide import DecideSequence

    return DecideSequence(form)


def _h6(endpoint: str):
    def build(form: str):
        from benchmarks.bench_stream_deltas import h6_stream

        return h6_stream(form, endpoint, 1_000)
    return build


CASES: tuple[Case, ...] = (
    Case("h1-step-2048", "H1", 1, _h1),
    *(Case(f"h2-{kind}-chunk", "H2", 1_000, _h2(kind)) for kind in ("first", "content", "finish")),
    Case("h3-request-1k", "H3", 2, _h3),
    *(Case(f"h4-{stage.replace('_', '-')}-10k", "H4", 4, _h4(stage))
      for stage in ("ingest", "decode_append", "fill_rebuild", "batch_tensor", "finish", "lifecycle")),
    Case("h5-decide", "H5", 1, _h5),
    *(Case(f"h6-{endpoint}-1k", "H6", 1, _h6(endpoint)) for endpoint in ("chat", "completions-echo")),
)
"""The CI families, one size each (about 10 ms of native time per counted region)."""
FORMS = ("legacy", "optimized")


def case_names() -> list[str]:
    """Every case's name, in ``CASES`` order."""
    return [case.name for case in CASES]


def measure(only: str | None = None, python: str = sys.executable) -> dict[str, dict]:
    """Instructions per call of every case and form: ``{"case/form": {"per_call", "counts", ...}}``.

    Runs one callgrind process of ``python`` (default: this interpreter). Raises
    ``NonDeterministic`` when a case's two counts differ by more than ``REPEAT_BOUND``.
    """
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        raise RuntimeError("valgrind is not installed: instruction counts need valgrind --tool=callgrind")
    with tempfile.TemporaryDirectory(prefix="instr-") as tmp:
        out = Path(tmp) / "callgrind.out"
        manifest = Path(tmp) / "manifest.json"
        cmd = [*_setarch(), valgrind, "--tool=callgrind", "--instr-atstart=no", "--collect-atstart=no",
               "--dump-line=no", "--dump-instr=no", "--compress-strings=no",
               f"--callgrind-out-file={out}", _interpreter(python), str(Path(__file__).resolve()),
               "--child", "--manifest", str(manifest), "--bench-dir", str(BENCH_DIR)]
        if only:
            cmd += ["--only", only]
        proc = subprocess.run(cmd, env=_child_env(), capture_output=True, text=True, timeout=TIMEOUT_S)
        if proc.returncode != 0:
            raise RuntimeError(f"the callgrind run failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
        return _collect(json.loads(manifest.read_text()), out)


class NonDeterministic(RuntimeError):
    """A case counted twice in one process gave counts further apart than ``REPEAT_BOUND``."""


def _interpreter(python: str) -> str:
    # NOTE: not resolved through symlinks: a virtualenv's python finds its environment by its
    # own path. A script (a pyenv shim) would put the shell, not Python, under callgrind.
    with open(python, "rb") as f:
        if f.read(2) == b"#!":
            raise RuntimeError(f"{python} is a script, not an interpreter binary: pass sys.executable")
    return python


def _setarch() -> list[str]:
    setarch = shutil.which("setarch")
    return [setarch, "-R"] if setarch else []


def _child_env() -> dict[str, str]:
    env = {key: os.environ[key] for key in _ENV_KEEP if key in os.environ}
    env.update(dict.fromkeys(_THREAD_VARS, "1"))
    env["PYTHONHASHSEED"] = "0"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _collect(manifest: dict, out: Path) -> dict[str, dict]:
    results, bad = {}, []
    dumps = iter(range(1, 1 + 2 * len(manifest["regions"])))
    for region in manifest["regions"]:
        counts = [_total(Path(f"{out}.{next(dumps)}")) for _ in range(2)]
        spread = abs(counts[0] - counts[1]) / max(min(counts), 1)
        results[region["key"]] = {"per_call": sum(counts) / (2 * region["calls"]), "counts": counts,
                                  "calls": region["calls"], "spread": spread}
        if spread > REPEAT_BOUND:
            bad.append(f"{region['key']}: {counts[0]:,} vs {counts[1]:,} ({spread:.2%})")
    for key, why in manifest["unavailable"].items():
        results[key] = {"per_call": None, "unavailable": why}
    if bad:
        raise NonDeterministic("instruction counts not reproducible within "
                               f"{REPEAT_BOUND:.1%} in one process: " + "; ".join(bad))
    return results


def _total(path: Path) -> int:
    match = re.search(r"^totals:\s+(\d+)", path.read_text(), re.MULTILINE)
    if match is None:
        raise RuntimeError(f"no totals line in {path}")
    return int(match.group(1))


# -- the child, under callgrind -------------------------------------------------------------------

def _child(manifest_path: str, only: str | None) -> None:
    _pin_sources_of_variation()
    from benchmarks.common import set_single_thread

    set_single_thread()
    selected = [c for c in CASES if not only or re.search(only, c.name)]
    built, unavailable = [], {}
    for case in selected:
        for form in FORMS:
            key = f"{case.name}/{form}"
            try:
                workload = case.build(form)
            except NotImplementedError as exc:
                unavailable[key] = str(exc)
                continue
            run = workload.run
            for _ in range(min(case.calls, 3) + 1):
                run()
            built.append((key, case.calls, workload))
    regions = count_regions([(key, calls, workload.run) for key, calls, workload in built])
    for _, _, workload in built:
        close = getattr(workload, "close", None)
        if close is not None:
            close()
    Path(manifest_path).write_text(json.dumps({"regions": regions, "unavailable": unavailable}))


def count_regions(built: list[tuple[str, int, Callable[[], object]]]) -> list[dict]:
    """In the callgrind child: turn instrumentation on and count each ``(key, calls, run)`` twice,
    each count dumped on its own; the manifest's regions, in dump order."""
    import gc

    import torch

    _instrumentation_on()
    regions = []
    for key, calls, run in built:
        run()  # translations made under instrumentation, before the count
        for _ in range(2):
            gc.collect()
            gc.freeze()
            torch._C._valgrind_toggle()
            for _ in range(calls):
                run()
            torch._C._valgrind_toggle_and_dump_stats()
        regions.append({"key": key, "calls": calls})
    return regions


def _pin_sources_of_variation() -> None:
    import random
    import uuid

    rng = random.Random(0)
    uuid.uuid4 = lambda: uuid.UUID(int=rng.getrandbits(128), version=4)
    fixed = 1_700_000_000.0
    time.time = lambda: fixed


def _instrumentation_on() -> None:
    # NOTE: valgrind reads callgrind_control's command between basic blocks; sleeping in short
    # slices (not one blocking wait) lets it answer while the command runs.
    ctl = subprocess.Popen(["callgrind_control", "-i", "on", str(os.getpid())],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    while ctl.poll() is None:
        time.sleep(0.01)
    reply = ctl.stdout.read().decode()
    if ctl.returncode != 0 or "OK" not in reply:
        raise RuntimeError(f"callgrind_control -i on failed: {reply}")


def _import_benchmarks_package(bench_dir: str) -> None:
    """Make ``benchmarks`` importable from ``bench_dir`` alone, as asv does: the code measured
    is whatever ``reference_impl`` the interpreter has installed, never the checkout beside it."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("benchmarks", Path(bench_dir) / "__init__.py",
                                                  submodule_search_locations=[bench_dir])
    module = importlib.util.module_from_spec(spec)
    sys.modules["benchmarks"] = module
    spec.loader.exec_module(module)


def _print_table(results: dict[str, dict]) -> None:
    print("| case | legacy instr/call | optimized instr/call | optimized/legacy |")
    print("|---|---|---|---|")
    for name in case_names():
        legacy, optimized = (results.get(f"{name}/{form}", {}).get("per_call") for form in FORMS)
        ratio = f"{optimized / legacy:.3f}" if legacy and optimized else "n/a"
        print(f"| {name} | {_fmt(legacy)} | {_fmt(optimized)} | {ratio} |")


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.0f}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", help="write the counts as JSON here")
    parser.add_argument("--only", help="a regex over case names")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--manifest", help=argparse.SUPPRESS)
    parser.add_argument("--bench-dir", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child(args.manifest, args.only)
        return
    start = time.perf_counter()
    results = measure(args.only)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    _print_table(results)
    print(f"({len(results)} counts, largest two-count spread "
          f"{max((r.get('spread', 0) for r in results.values()), default=0):.4%}, "
          f"{time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    if "--child" in sys.argv:
        sys.path.pop(0)  # this file's directory: benchmarks/ must not shadow top-level names
        _import_benchmarks_package(sys.argv[sys.argv.index("--bench-dir") + 1])
        from benchmarks.instructions import main as _main

        _main()
    else:
        main()
