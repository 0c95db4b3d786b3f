"""Next-token sampling for a batch: greedy, temperature, top-k, top-p, per-request seeds.

Each request draws one uniform number per step from its own ``random.Random`` (seeded by
the request's seed and choice index when it has one), so a seeded request's tokens do not
depend on what else is in the batch; the rest of the work is batched tensor ops.

No full-vocabulary sort: greedy batches take the argmax; unrestricted sampling inverts the CDF
of the unsorted probabilities; top-k/top-p work on ``torch.topk`` of the largest
``max(top_k)`` probabilities (``TOP_P_CANDIDATES`` for top-p alone, widened to the whole
vocabulary only if those do not hold a row's top-p mass).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from reference_impl.messages import SamplingParams
from reference_impl.tokenizer import Tokenizer

logger = logging.getLogger("reference_impl.engine.torch")

TOP_P_CANDIDATES = 1024


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
    num_candidates: int  # topk width covering every restricted row; 0: no row is restricted

    @classmethod
    def build(cls, params: Sequence[SamplingParams], rngs: Sequence[random.Random],
              vocab_size: int, device: torch.device) -> SamplingBatch:
        """From each request's params and uniform source (drawn only for non-greedy ones)."""
        is_all_greedy = all(p.temperature == 0 for p in params)
        top_ks = [p.top_k if 0 < p.top_k < vocab_size else vocab_size for p in params]
        widths = [k if k < vocab_size else TOP_P_CANDIDATES
                  for k, p in zip(top_ks, params, strict=True)
                  if p.temperature != 0 and (k < vocab_size or p.top_p < 1)]
        uniforms = [0.0 if p.temperature == 0 else rng.random() for p, rng in zip(params, rngs, strict=True)]
        return cls(
            temperatures=torch.tensor([p.temperature for p in params], dtype=torch.float32, device=device),
            top_ps=torch.tensor([p.top_p for p in params], dtype=torch.float32, device=device),
            top_ks=torch.tensor(top_ks, dtype=torch.int64, device=device),
            uniforms=torch.tensor(uniforms, dtype=torch.float32, device=device),
            is_all_greedy=is_all_greedy,
            num_candidates=min(vocab_size, max(widths, default=0)),
        )


def blocked_ids_mask(tokenizer: Tokenizer, vocab_size: int,
                     device: torch.device) -> torch.Tensor | None:
    """(vocab,) bool, True at the model's ids past the tokenizer's (their logits become -inf
    before sampling, so every sampled id decodes); None when the two vocabularies are one.
    ValueError when the tokenizer has ids past the model's (prompts the embedding cannot read)."""
    if tokenizer.vocab_size > vocab_size:
        raise ValueError(f"the tokenizer has {tokenizer.vocab_size} ids, the model's vocabulary "
                         f"only {vocab_size}: pass the model's own --tokenizer-path")
    if tokenizer.vocab_size == vocab_size:
        return None
    logger.info("sampling restricted to the %d ids the tokenizer decodes, of the model's %d "
                "(the output layer still computes all of them)", tokenizer.vocab_size, vocab_size)
    return torch.arange(vocab_size, device=device) >= tokenizer.vocab_size


def sample(logits: torch.Tensor, batch: SamplingBatch) -> torch.Tensor:
    """logits: (batch, vocab) float32 → (batch,) int64 next token ids."""
    greedy = logits.argmax(dim=-1)
    if batch.is_all_greedy:
        return greedy
    probs = torch.softmax(logits / batch.temperatures.clamp_min(1e-5).unsqueeze(-1), dim=-1)
    sampled = _inverse_cdf(probs, torch.arange(probs.shape[-1], device=probs.device), batch.uniforms)
    if batch.num_candidates:
        restricted = (batch.top_ks < probs.shape[-1]) | (batch.top_ps < 1)
        sampled = torch.where(restricted, _sample_top_k_top_p(probs, batch), sampled)
    return torch.where(batch.temperatures == 0, greedy, sampled)


def _inverse_cdf(weights: torch.Tensor, ids: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """weights: (batch, n) ≥ 0; ids: (n,) or (batch, n) token of each column → (batch,)."""
    cdf = weights.cumsum(dim=-1)
    target = (uniforms * cdf[:, -1]).unsqueeze(-1)
    choice = torch.searchsorted(cdf, target, right=True).clamp_max(weights.shape[-1] - 1)
    ids = ids.expand_as(weights) if ids.dim() == 1 else ids
    return ids.gather(1, choice).squeeze(1)


def _sample_top_k_top_p(probs: torch.Tensor, batch: SamplingBatch) -> torch.Tensor:
    vocab = probs.shape[-1]
    top, ids = probs.topk(batch.num_candidates, dim=-1)  # (batch, k), sorted descending
    if batch.num_candidates < vocab:
        # a row limited by top-p alone needs its whole nucleus among the candidates
        short = (batch.top_ks >= vocab) & (top.sum(dim=-1) < batch.top_ps)
        if bool(short.any()):
            top, ids = probs.sort(dim=-1, descending=True)
    rank = torch.arange(top.shape[-1], device=probs.device)
    keep = rank.unsqueeze(0) < batch.top_ks.unsqueeze(-1)
    # NOTE: the most likely token is always kept (the mass before it is 0 < top_p).
    keep &= (top.cumsum(dim=-1) - top) < batch.top_ps.unsqueeze(-1)
    return _inverse_cdf(top * keep, ids, batch.uniforms)
