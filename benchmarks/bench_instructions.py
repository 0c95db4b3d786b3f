"""Instructions per call of every hot path's CI family, legacy and optimized (callgrind).

Deterministic where wall time is not: the CI's count gate runs ``asv continuous`` on these
with a factor of 1.01 (``scripts/asv_ci.sh``). One callgrind process per commit measures every
case (``setup_cache``, see ``benchmarks/instructions.py``); the benchmarks read its result.
"""

from benchmarks.common import FORMS, history_safe
from benchmarks.instructions import TIMEOUT_S, case_names, measure


def setup_cache():
    with history_safe():
        return measure()


setup_cache.timeout = TIMEOUT_S


class TrackInstructions:
    """Instructions per call, the mean of two counts in one callgrind process."""

    params = (case_names(), list(FORMS))
    param_names = ["case", "form"]
    unit = "instructions"
    timeout = TIMEOUT_S

    def setup(self, counts, case, form):
        if counts.get(f"{case}/{form}", {}).get("per_call") is None:
            raise NotImplementedError(counts.get(f"{case}/{form}", {}).get("unavailable", "not measured"))

    def track_instructions(self, counts, case, form):
        return counts[f"{case}/{form}"]["per_call"]
