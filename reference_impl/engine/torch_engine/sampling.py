"""Next-token sampling for a batch: greedy, temperature, top-k, top-p, per-request seeds.

Each request draws one uniform number per step from its own ``random.Random`` (seeded by
the request's seed and choice index when it has one), so a seeded request's tokens do not
depend on what else is in the batch; the rest of the work is batched tensor ops.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from reference_impl.messages import SamplingParams


def request_rng(params: SamplingParams, choice_index: int) -> random.Random:
    """The uniform source of one request: seeded when the request is, else from OS entropy."""
    if params.seed is None:
        return random.Random()
    return random.Random(params.seed * 1_000_003 + choice_index)


@dataclass
class SamplingBatch:
    """Per-request sampling parameters of one step, as (batch,) tensors."""

    temperatures: torch.Tensor  # (batch,) float32; 0 means greedy
    top_ps: torch.Tensor  # (batch,) float32
    top_ks: torch.Tensor  # (batch,) int64; vocab size when unlimited
    uniforms: torch.Tensor  # (batch,) float32 in [0, 1)
    is_all_greedy: bool

    @classmethod
    def build(cls, params: Sequence[SamplingParams], rngs: Sequence[random.Random],
              vocab_size: int, device: torch.device) -> SamplingBatch:
        """From each request's params and uniform source (drawn only for non-greedy ones)."""
        is_all_greedy = all(p.temperature == 0 for p in params)
        uniforms = [0.0 if p.temperature == 0 else rng.random() for p, rng in zip(params, rngs, strict=True)]
        return cls(
            temperatures=torch.tensor([p.temperature for p in params], dtype=torch.float32, device=device),
            top_ps=torch.tensor([p.top_p for p in params], dtype=torch.float32, device=device),
            top_ks=torch.tensor([p.top_k if 0 < p.top_k < vocab_size else vocab_size for p in params],
                                dtype=torch.int64, device=device),
            uniforms=torch.tensor(uniforms, dtype=torch.float32, device=device),
            is_all_greedy=is_all_greedy,
        )


def sample(logits: torch.Tensor, batch: SamplingBatch) -> torch.Tensor:
    """logits: (batch, vocab) float32 → (batch,) int64 next token ids."""
    greedy = logits.argmax(dim=-1)
    if batch.is_all_greedy:
        return greedy
    vocab = logits.shape[-1]
    probs = torch.softmax(logits / batch.temperatures.clamp_min(1e-5).unsqueeze(-1), dim=-1)
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    rank = torch.arange(vocab, device=logits.device)
    keep = rank.unsqueeze(0) < batch.top_ks.unsqueeze(-1)
    # NOTE: the most likely token is always kept (the mass before it is 0 < top_p).
    keep &= (sorted_probs.cumsum(dim=-1) - sorted_probs) < batch.top_ps.unsqueeze(-1)
    cdf = (sorted_probs * keep).cumsum(dim=-1)
    target = (batch.uniforms * cdf[:, -1]).unsqueeze(-1)
    choice = torch.searchsorted(cdf, target, right=True).clamp_max(vocab - 1)
    sampled = order.gather(1, choice).squeeze(1)
    return torch.where(batch.temperatures == 0, greedy, sampled)
