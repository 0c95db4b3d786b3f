"""H3 tokenizer-manager outputs of one request: copy vs reference."""

from __future__ import annotations

from benchmarks.bench_stream_outputs import TimeStreamOutputs, h3_stream
from tests.benchmarks.conftest import asv_params


@asv_params(TimeStreamOutputs)
def test_stream_outputs(bench, form, num_tokens):
    workload = h3_stream(form, num_tokens)
    try:
        assert bench(workload.run) >= num_tokens
    finally:
        workload.close()


def test_both_forms_hand_over_the_same_outputs():
    totals = []
    for form in ("legacy", "optimized"):
        workload = h3_stream(form, 1_000)
        totals.append(workload.run())
        workload.close()
    assert totals[0] == totals[1]
