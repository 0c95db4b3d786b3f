"""H4 token storage stages: list vs array('q')."""

from __future__ import annotations

import pytest

from benchmarks.bench_token_storage import TimeTokenStorage
from benchmarks.workloads import H4_STAGES, TokenLifecycle, form_args
from benchmarks.workloads.scheduler import H4_DECODE_STEPS, H4_NUM_REQS
from tests.benchmarks.conftest import asv_params


@asv_params(TimeTokenStorage)
def test_token_storage_stage(bench, form, prompt_len, stage):
    workload = TokenLifecycle(form_args("H4", form), prompt_len, stage)
    bench(workload.run)
    assert all(len(req.output_ids) == H4_DECODE_STEPS for req in workload.reqs)


@pytest.mark.parametrize("form", ["legacy", "optimized"])
def test_lifecycle_builds_every_request_ids(form):
    assert "lifecycle" in H4_STAGES
    cached = TokenLifecycle(form_args("H4", form), 1_000, "lifecycle").run()
    assert len(cached) == H4_NUM_REQS
    assert [t.numel() for t in cached] == [1_000 + H4_DECODE_STEPS] * H4_NUM_REQS
    assert cached[0].tolist() != cached[1].tolist()
