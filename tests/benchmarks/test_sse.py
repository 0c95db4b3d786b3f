"""H2 chat chunk encoding: pydantic vs msgspec."""

from __future__ import annotations

import json

import pytest

from benchmarks.bench_sse import TimeChatChunk
from benchmarks.workloads import H2_CHUNKS, ChunkEncoding, form_args
from tests.benchmarks.conftest import asv_params


@asv_params(TimeChatChunk)
def test_encode_chunk(bench, form, chunk):
    data = bench(ChunkEncoding(form_args("H2", form), chunk).run)
    assert data.startswith(b"data: {") and data.endswith(b"}\n\n")


def _without_nulls(obj):
    if isinstance(obj, dict):
        return {k: _without_nulls(v) for k, v in obj.items() if v is not None}
    if isinstance(obj, list):
        return [_without_nulls(v) for v in obj]
    return obj


@pytest.mark.parametrize("chunk", H2_CHUNKS)
def test_both_forms_encode_the_same_chunk(chunk):
    legacy, optimized = (json.loads(ChunkEncoding(form_args("H2", form), chunk).run()[len(b"data: "):])
                         for form in ("legacy", "optimized"))
    assert _without_nulls(legacy) == _without_nulls(optimized)
