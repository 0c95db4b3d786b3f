"""Upstream sglang's hot-path cases under asv, one result set per release commit.

asv runs this against the release repository (`benchmarks/upstream/asv_repo.py`): the release's
source tree and this project are on `ASV_PYTHONPATH`; the stubs are installed here because asv
starts every benchmark in a filtered environment.
"""

from benchmarks.upstream import stubs

stubs.install()

from benchmarks.upstream.cases import CASES  # noqa: E402

_BY_NAME = {case.name: case for case in CASES}
TIMED = [case.name for case in CASES if case.scale is not None]
COUNTED = [case.name for case in CASES if case.scale is None]


def _build(name: str):
    try:
        return _BY_NAME[name].build()
    except (ImportError, AttributeError, TypeError) as exc:
        raise NotImplementedError(f"not in this release: {exc}") from exc


class TimeUpstream:
    """One call of an upstream case (the same callable `python -m benchmarks.upstream` times)."""

    params = [TIMED]
    param_names = ["case"]
    rounds = 2
    repeat = (2, 4, 0.4)
    warmup_time = 0.05
    timeout = 300

    def setup(self, case):
        self.fn = _build(case)

    def time_case(self, case):
        self.fn()


class TrackUpstreamCounts:
    """A deterministic figure of a case: event-loop turns of one H1 step."""

    params = [COUNTED]
    param_names = ["case"]
    unit = "turns"
    timeout = 300

    def setup(self, case):
        self.fn = _build(case)

    def track_case(self, case):
        return self.fn()

