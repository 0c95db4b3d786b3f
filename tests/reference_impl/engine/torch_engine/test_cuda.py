"""CUDA only (skipped elsewhere): bf16 default, and decode replayed from CUDA graphs gives
the eager logits."""

from __future__ import annotations

import pytest
import torch

from reference_impl.config import ServerArgs
from reference_impl.engine.torch_engine import TorchEngine
from reference_impl.scheduler.token_storage import get_token_storage
from reference_impl.tokenizer import ByteLevelTokenizer
from tests.reference_impl.engine.torch_engine.helpers import make_req

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _engine(**overrides) -> TorchEngine:
    args = ServerArgs(engine="torch", device="cuda", max_total_tokens=8192, **overrides)
    return TorchEngine(args, ByteLevelTokenizer(), get_token_storage("array"))


def test_cuda_defaults_to_bfloat16_with_graphs():
    engine = _engine()
    assert engine.dtype == torch.bfloat16 and engine._graphs is not None


@pytest.mark.parametrize("batch_size", [1, 3, 17])
def test_graph_decode_matches_eager_decode(batch_size):
    storage = get_token_storage("array")
    graphed, eager = _engine(dtype="float32"), _engine(dtype="float32", disable_cuda_graph=True)
    results = []
    for engine in (graphed, eager):
        reqs = [make_req(f"r{i}", [256, *b"x" * (i + 1)], storage) for i in range(batch_size)]
        logits = engine.compute_logits(reqs)
        steps = []
        for step in range(4):
            for req in reqs:
                req.output_ids.append(65 + step)  # the same inputs in both engines
            logits = engine.compute_logits(reqs)
            steps.append(logits.clone())
        results.append(torch.stack(steps))
    torch.testing.assert_close(results[0], results[1], rtol=1e-4, atol=1e-4)
