"""End to end: the reference server and loadgen on 127.0.0.1, all-legacy vs all-optimized.

Small scale (256 streams, short outputs) so it fits a 2-core machine; the server uses the
sim engine's default latency profile and real clock. Runs through the experiment harness.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from benchmarks.common import SEED, history_safe

E2E_CONFIGS = ("all-legacy", "all-optimized")


def e2e_run(config: str, concurrency: int = 256, input_len: int = 128, output_len: int = 64) -> dict:
    """Start a server in form ``config``, run loadgen against it, stop it; loadgen's result JSON."""
    with history_safe():
        from harness import Load, by_name, run_under_load
    load = Load(concurrency, concurrency, input_len, output_len, seed=SEED)
    with tempfile.TemporaryDirectory() as tmp:
        return run_under_load(by_name(config), load, Path(tmp)).loadgen
