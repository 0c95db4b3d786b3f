"""Seeded workload builders, written once and driven by the asv classes and the pytest-benchmark tests.

Every builder returns an object whose ``run()`` is the timed body (one call) or a dict of
tracked figures; all data is built before it returns. Each goes through the reference stack's
own code (``reference_impl``), imported lazily so that a benchmark module imports at any commit.
"""

from benchmarks.workloads.args import form_args
from benchmarks.workloads.e2e import E2E_CONFIGS, e2e_run
from benchmarks.workloads.scheduler import (
    DELAYER_MODES,
    H4_STAGES,
    PrefillDelayerRun,
    TokenLifecycle,
)
from benchmarks.workloads.serving import (
    H2_CHUNKS,
    ChunkEncoding,
    OneRequestStream,
    WakeupStep,
    token_texts,
)

__all__ = [
    "DELAYER_MODES", "E2E_CONFIGS", "H2_CHUNKS", "H4_STAGES", "ChunkEncoding", "OneRequestStream",
    "PrefillDelayerRun", "TokenLifecycle", "WakeupStep", "e2e_run", "form_args", "token_texts",
]
