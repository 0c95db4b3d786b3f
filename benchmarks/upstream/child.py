"""One release, measured in its own process: `python -m benchmarks.upstream.child H2 [H3 ...]`.

The caller puts the release's source tree first on `PYTHONPATH`; this installs the stubs,
runs each hot path's case and prints one JSON document (a list of rows) on stdout. A hot path
this release cannot run becomes a row with an ``error`` (one line), not a traceback.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import warnings


def measure(hot_paths: list[str]) -> list[dict]:
    """Rows of every case of ``hot_paths`` in the release first on `sys.path`."""
    from benchmarks.upstream import stubs

    stubs.install()
    from benchmarks.upstream.cases import CASES, measure

    rows = []
    for case in CASES:
        if case.hot_path not in hot_paths:
            continue
        try:
            rows.append(dataclasses.asdict(measure(case)))
        except Exception as exc:  # noqa: BLE001 - a release that lacks a name is a row, not a crash
            rows.append({"hot_path": case.hot_path, "case": case.name,
                         "error": f"{type(exc).__name__}: {exc}".splitlines()[0]})
    return rows


def main(argv: list[str]) -> int:
    warnings.simplefilter("ignore")
    rows = measure(argv)
    import sglang

    print(json.dumps({"sglang_file": sglang.__file__, "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
