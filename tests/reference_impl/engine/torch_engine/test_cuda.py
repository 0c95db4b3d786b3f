"""CUDA only (skipped elsewhere): bf16 and Triton by default, decode graphs captured at start-up
for every batch size, graph replay gives the eager logits at any KV width, the Triton backend
gives the torch fallback's logits in fp32 and bf16, and a 100K-token prompt prefills in chunks
within memory."""

from __future__ import annotations

import random

import pytest
import torch

from reference_impl.config import ServerArgs
from reference_impl.engine.torch_engine import TorchEngine
from reference_impl.engine.torch_engine.cuda_graph import graph_batch_sizes
from reference_impl.hot_paths import HOT_PATHS
from reference_impl.tokenizer import ByteLevelTokenizer
from tests.reference_impl.engine.torch_engine.helpers import make_req

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _engine(**overrides) -> TorchEngine:
    args = ServerArgs(**{"engine": "torch", "device": "cuda", "max_total_tokens": 65536,
                         "cuda_graph_max_bs": 64, **overrides})
    return TorchEngine(args, ByteLevelTokenizer(), HOT_PATHS["H4"].create("array"))


def _decode_run(engine: TorchEngine, batch_size: int, prompt_len: int, steps: int) -> torch.Tensor:
    storage = HOT_PATHS["H4"].create("array")
    reqs = [make_req(f"r{i}", [256, *b"x" * (prompt_len + 7 * i)], storage, max_new=steps + 1)
            for i in range(batch_size)]
    engine.compute_logits(reqs)
    out = []
    for step in range(steps):
        for req in reqs:
            req.output_ids.append(65 + step)  # the same inputs in every engine
        out.append(engine.compute_logits(reqs).clone())
    for req in reqs:
        engine.release(req)
    return torch.stack(out)


def test_defaults_bfloat16_triton_and_every_graph_captured_at_start_up():
    engine = _engine(cuda_graph_max_bs=512)
    assert engine.dtype == torch.bfloat16 and engine.model.attn_backend.name == "triton"
    assert sorted(engine._graphs._graphs) == graph_batch_sizes(512)


@pytest.mark.parametrize("batch_size,prompt_len", [(1, 5), (3, 1500), (17, 40), (48, 600)])
def test_graph_decode_matches_eager_decode(batch_size, prompt_len):
    graphed = _decode_run(_engine(dtype="float32"), batch_size, prompt_len, 4)
    eager = _decode_run(_engine(dtype="float32", disable_cuda_graph=True), batch_size, prompt_len, 4)
    torch.testing.assert_close(graphed, eager, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype,tol", [("float32", 1e-3), ("bfloat16", 3e-2)])
def test_triton_backend_matches_the_torch_fallback(dtype, tol):
    """In bf16 too, the serving dtype: a bf16-only kernel bug would otherwise pass for the
    random model's random tokens (the CPU interpreter cannot check bf16)."""
    triton_logits = _decode_run(_engine(dtype=dtype), 5, 600, 3)
    torch_logits = _decode_run(_engine(dtype=dtype, attention_backend="torch_native"), 5, 600, 3)
    torch.testing.assert_close(triton_logits, torch_logits, rtol=tol, atol=tol)


def test_100k_token_prompt_prefills_in_chunks_within_memory():
    engine = _engine(max_total_tokens=110_000, context_length=131_072, cuda_graph_max_bs=8,
                     max_running_requests=16)
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    rng = random.Random(0)
    req = make_req("long", [rng.randrange(256) for _ in range(100_000)],
                   HOT_PATHS["H4"].create("array"), max_new=8)
    logits = engine.compute_logits([req])
    assert logits.shape == (1, engine.config.vocab_size) and bool(logits.isfinite().all())
    extra = torch.cuda.max_memory_allocated() - base
    assert extra < 1 << 30, f"prefill took {extra / 2**20:.0f} MiB beyond the pools"
    engine.release(req)
