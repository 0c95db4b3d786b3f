"""Instruction counts of the upstream cases, one callgrind run per release (`setup_cache`).

A module of its own: asv hands a module's `setup_cache` result to every benchmark in it.
"""

from benchmarks.upstream import stubs

stubs.install()

from benchmarks.upstream.cases import CASES  # noqa: E402

TIMED = [case.name for case in CASES if case.scale is not None]


def setup_cache():
    """Count every timed case on this release under callgrind, once per release."""
    import sys
    from pathlib import Path

    import sglang

    from benchmarks.upstream.counts import measure_tree

    return measure_tree(Path(sglang.__file__).parents[1], sys.executable)


setup_cache.timeout = 1800


class TrackUpstreamInstructions:
    """Instructions per call of a case (callgrind): what makes a 2% change visible."""

    params = [TIMED]
    param_names = ["case"]
    unit = "instructions"
    timeout = 1800

    def setup(self, counts, case):
        if counts.get(case, {}).get("per_call") is None:
            raise NotImplementedError(counts.get(case, {}).get("unavailable", "not measured"))

    def track_instructions(self, counts, case):
        return counts[case]["per_call"]
