"""H1 wake-ups of waiting chat streams: immediate vs batched."""

from __future__ import annotations

import pytest

from benchmarks.bench_wakeups import LEGACY_NOTIFY_SIZE, TimeWakeups, h1_step
from tests.benchmarks.conftest import asv_params


@asv_params(TimeWakeups)
def test_wakeup_step(bench, form, num_consumers, batch_notify_size):
    if form == "legacy" and batch_notify_size != LEGACY_NOTIFY_SIZE:
        pytest.skip("the legacy form has no batch notify size")
    workload = h1_step(form, num_consumers, batch_notify_size)
    try:
        bench(workload.run)
        workload.run()  # returns only once every stream has produced its chunk
    finally:
        workload.close()
