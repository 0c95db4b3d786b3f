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


def _no_sort(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("full-vocabulary sort")

    monkeypatch.setattr(torch.Tensor, "sort", refuse)


def test_common_cases_sample_without_a_full_sort(monkeypatch):
    _no_sort(monkeypatch)
    logits = torch.randn(8, VOCAB, generator=torch.Generator().manual_seed(2)) * 4
    params = [SamplingParams(8, temperature=0.7, top_k=5, top_p=0.9, seed=1),
              SamplingParams(8, temperature=1.0, seed=2), SamplingParams(8, temperature=0),
              SamplingParams(8, temperature=1.0, top_p=0.8, seed=3)] * 2
    ids = _sample(logits, params)
    assert ids[2] == int(logits[2].argmax())
    assert ids[0] in logits[0].topk(5).indices.tolist()


def test_unrestricted_sampling_follows_the_distribution():
    probs = torch.tensor([0.5, 0.25, 0.125, 0.125] + [0.0] * (VOCAB - 4))
    logits = probs.clamp_min(1e-30).log().repeat(4000, 1)
    params = [SamplingParams(8, temperature=1.0, seed=i) for i in range(4000)]
    counts = torch.bincount(torch.tensor(_sample(logits, params)), minlength=VOCAB).float() / 4000
    torch.testing.assert_close(counts, probs, atol=0.03, rtol=0)


def test_top_p_whose_nucleus_exceeds_the_candidates_widens_to_the_vocabulary():
    vocab = 3000  # near-uniform: a top-p of 0.9 keeps ~2700 tokens, more than TOP_P_CANDIDATES
    logits = (-1e-6 * torch.arange(vocab, dtype=torch.float32)).repeat(300, 1)
    params = [SamplingParams(8, temperature=1.0, top_p=0.9, seed=i) for i in range(300)]
    rngs = [request_rng(p, 0) for p in params]
    ids = sample(logits, SamplingBatch.build(params, rngs, vocab, torch.device("cpu"))).tolist()
    assert max(ids) < 2750 and sum(i >= 1024 for i in ids) > 100
