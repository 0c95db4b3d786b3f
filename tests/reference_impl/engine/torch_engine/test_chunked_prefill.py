"""Chunked prefill: forwards of at most ``--chunked-prefill-size`` tokens give the logits of one
unchunked forward (prompts, a cached prefix, decodes mixed in); the Triton backend under the
interpreter gives the torch fallback's logits through the whole engine."""

from __future__ import annotations

import pytest
import torch

from reference_impl.engine.torch_engine.chunked_prefill import Piece, split_into_forwards
from tests.reference_impl.engine.torch_engine.helpers import make_engine, make_req, triton_device

PROMPTS = [[256, *b"a longer prompt that spans several chunks of the forward"], [256, *b"hi"],
           list(range(40, 120))]


def test_split_keeps_each_request_in_order_and_marks_its_last_part():
    pieces = [Piece(1, 0, 10, list(range(10)), True), Piece(2, 4, 5, [99], True),
              Piece(3, 2, 9, list(range(2, 9)), True)]
    forwards = list(split_into_forwards(pieces, 4))
    assert [sum(p.end - p.start for p in f) for f in forwards] == [4, 4, 4, 4, 2]
    parts = [p for f in forwards for p in f]
    assert [(p.row, p.start, p.end) for p in parts] == [
        (1, 0, 4), (1, 4, 8), (1, 8, 10), (2, 4, 5), (3, 2, 3), (3, 3, 7), (3, 7, 9)]
    assert [p.ids for p in parts if p.row == 3] == [[2], [3, 4, 5, 6], [7, 8]]
    assert [p.row for p in parts if p.is_last] == [1, 2, 3]


def _run_steps(engine, storage, num_decode: int = 3) -> list[torch.Tensor]:
    """Prefill, decode steps, then a follower over a cached prefix mixed with a decode."""
    reqs = [make_req(f"r{i}", ids, storage) for i, ids in enumerate(PROMPTS)]
    steps = [engine.compute_logits(reqs)]
    for step in range(num_decode):
        for req in reqs:
            req.output_ids.append(65 + step)
        steps.append(engine.compute_logits(reqs))
    engine.release(reqs[0])
    follower = make_req("f", list(reqs[0].origin_input_ids) + [*b" and a tail of new tokens"],
                        storage)
    reqs[1].output_ids.append(70)
    steps.append(engine.compute_logits([reqs[1], follower]))
    for req in (reqs[1], reqs[2], follower):
        engine.release(req)
    engine.prefix_cache.clear()
    assert engine.num_free_slots == engine.max_total_num_tokens
    return steps


@pytest.mark.parametrize("chunk", [1, 7, 64])
def test_chunked_logits_equal_unchunked_logits(chunk):
    expected = _run_steps(*make_engine(chunked_prefill_size=8192))
    chunked = _run_steps(*make_engine(chunked_prefill_size=chunk))
    for a, b in zip(chunked, expected, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


def test_triton_backend_under_the_interpreter_matches_the_torch_fallback():
    if triton_device().type != "cpu":
        pytest.skip("the CPU engine's Triton path is the interpreter's (test_cuda covers CUDA)")
    expected = _run_steps(*make_engine(attention_backend="torch_native"), num_decode=1)
    engine, storage = make_engine(attention_backend="triton", chunked_prefill_size=32)
    assert engine.model.attn_backend.name == "triton"
    for a, b in zip(_run_steps(engine, storage, num_decode=1), expected, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
