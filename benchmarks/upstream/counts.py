"""Instruction counts of the upstream cases under callgrind: the count gate's upstream cases.

    python -m benchmarks.upstream.counts VERSION [--only REGEX]

Same method as `benchmarks/instructions.py` (one callgrind process, instrumentation turned on
after the imports, each case counted twice and the two counts checked against each other), on
one release's tree with the cached venv's interpreter. Each case is counted over ``calls``
calls: about 1-10 ms of native work, as the reference cases.
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
from pathlib import Path

from benchmarks import instructions
from benchmarks.upstream import releases

CALLS = {"us": 200, "ms": 1}
"""Calls per counted region, by the case's unit."""


def measure_tree(src: Path, python: str, only: str | None = None) -> dict[str, dict]:
    """Instructions per call of every timed case on the release tree ``src`` (run by ``python``)."""
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        raise RuntimeError("valgrind is not installed: instruction counts need valgrind --tool=callgrind")
    with tempfile.TemporaryDirectory(prefix="upstream-instr-") as tmp:
        out, manifest = Path(tmp) / "callgrind.out", Path(tmp) / "manifest.json"
        cmd = [*instructions._setarch(), valgrind, "--tool=callgrind", "--instr-atstart=no",
               "--collect-atstart=no", "--dump-line=no", "--dump-instr=no", "--compress-strings=no",
               f"--callgrind-out-file={out}", instructions._interpreter(python), "-m",
               "benchmarks.upstream.counts", "--child", str(manifest), *(["--only", only] if only else [])]
        env = {**instructions._child_env(),
               "PYTHONPATH": os.pathsep.join([str(src), str(releases.ROOT)])}
        proc = subprocess.run(cmd, env=env, cwd=releases.ROOT, capture_output=True, text=True,
                              timeout=instructions.TIMEOUT_S)
        if proc.returncode != 0:
            raise RuntimeError(f"the callgrind run failed (exit {proc.returncode}): "
                               f"{(proc.stderr.strip().splitlines() or ['no output'])[-1]}")
        return instructions._collect(json.loads(manifest.read_text()), out)


def _child(manifest: str, only: str | None) -> None:
    import warnings

    warnings.simplefilter("ignore")
    instructions._pin_sources_of_variation()
    from benchmarks.upstream import stubs

    stubs.install()
    from benchmarks.common import set_single_thread
    from benchmarks.upstream.cases import CASES

    set_single_thread()
    built, unavailable = [], {}
    for case in CASES:
        if case.scale is None or (only and not re.search(only, case.name)):
            continue
        try:
            run = case.build()
            run()
        except Exception as exc:  # noqa: BLE001 - a case this release lacks is reported, not fatal
            unavailable[case.name] = f"{type(exc).__name__}: {exc}".splitlines()[0]
            continue
        built.append((case.name, CALLS[case.unit], run))
    regions = instructions.count_regions(built)
    Path(manifest).write_text(json.dumps({"regions": regions, "unavailable": unavailable}))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("version", nargs="?", help="a release, e.g. 0.5.11")
    parser.add_argument("--only", help="a regex over case names")
    parser.add_argument("--child", metavar="MANIFEST", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child(args.child, args.only)
        return 0
    if not args.version:
        parser.error("a release is required")
    counts = measure_tree(releases.ensure_source(args.version), str(releases.ensure_venv()), args.only)
    for name, result in counts.items():
        per_call = result.get("per_call")
        print(f"{name:<22} {'n/a: ' + result['unavailable'] if per_call is None else f'{per_call:,.0f}'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
