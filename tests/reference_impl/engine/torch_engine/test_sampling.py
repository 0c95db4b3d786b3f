"""Sampling: greedy at temperature 0, top-k and top-p limits, seeded uniforms."""

from __future__ import annotations

import torch

from reference_impl.engine.torch_engine.sampling import SamplingBatch, request_rng, sample
from reference_impl.messages import SamplingParams

VOCAB = 50


def _sample(logits: torch.Tensor, params: list[SamplingParams], rngs=None) -> list[int]:
    rngs = rngs or [request_rng(p, 0) for p in params]
    return sample(logits, SamplingBatch.build(params, rngs, VOCAB, torch.device("cpu"))).tolist()


def test_temperature_zero_is_argmax_even_in_a_mixed_batch():
    logits = torch.randn(4, VOCAB, generator=torch.Generator().manual_seed(0))
    params = [SamplingParams(8, temperature=0), SamplingParams(8, temperature=1.0, seed=1)] * 2
    ids = _sample(logits, params)
    assert ids[0] == int(logits[0].argmax()) and ids[2] == int(logits[2].argmax())


def test_top_k_and_top_p_keep_only_the_allowed_tokens():
    logits = torch.randn(1, VOCAB, generator=torch.Generator().manual_seed(1)).repeat(200, 1)
    top3 = set(logits[0].topk(3).indices.tolist())
    ids = _sample(logits, [SamplingParams(8, temperature=5.0, top_k=3, seed=i) for i in range(200)])
    assert set(ids) <= top3 and len(set(ids)) > 1
    ids = _sample(logits, [SamplingParams(8, temperature=1.0, top_p=1e-6, seed=i) for i in range(200)])
    assert set(ids) == {int(logits[0].argmax())}


def test_same_seed_same_tokens_other_seed_other_tokens():
    logits = torch.zeros(64, VOCAB)  # uniform: every draw decides the token

    def run(seed):
        params = [SamplingParams(8, temperature=1.0, seed=seed)]
        rngs = [request_rng(params[0], 0)]
        return [_sample(logits[i:i + 1], params, rngs)[0] for i in range(64)]

    assert run(7) == run(7) and run(7) != run(8)
