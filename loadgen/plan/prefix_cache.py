"""Prefix-cache control: prompts that share a chosen fraction of their tokens with earlier prompts
(`--prefix-cache-hit-rate`), and the cache-bust tag (`--cache-bust`) that keeps a run's prompts
from hitting what earlier runs left in a server's prefix cache.

Sharing: every prompt starts with the first round(rate x its length) tokens of one seeded text,
then unique random words up to its length; a prompt's prefix is shared with each earlier prompt
whose shared part is at least as long. Cache bust ("bust first, then share"): where prompts
share nothing by design, each starts with its own tag (BUST_TAG_LEN tokens from the salt and its
index); where they share (the hit-rate control, `shared-prefix`, `mooncake`), the run's one tag
starts every prompt, so the run's prompts share as planned and share nothing with a run of
another salt.
"""

from __future__ import annotations

import random
import secrets
from dataclasses import replace

from loadgen.plan.config import DatasetConfig
from loadgen.plan.texts import Prompt, fill_to_len, units_of_len

#: Datasets whose prompts share prefixes by design: their cache-bust tag is the run's, not each prompt's.
SHARING_DATASETS = ("shared-prefix", "mooncake")
#: Tokens of a cache-bust tag: one vLLM KV block (16 tokens), so that no whole block of a tag is
#: another prompt's by chance.
BUST_TAG_LEN = 16


def with_run_salt(cfg: DatasetConfig) -> DatasetConfig:
    """`cfg` with a fresh cache-bust salt where `--cache-bust` was given without one."""
    return replace(cfg, cache_bust=secrets.token_hex(8)) if cfg.cache_bust == "" else cfg


def bust_tag(salt: str, key: str, tokenizer) -> list:
    """The BUST_TAG_LEN units (words, or token ids with a tokenizer) of tag `key` under `salt`."""
    return units_of_len(random.Random(f"cache-bust-{salt}-{key}"), BUST_TAG_LEN, tokenizer)


def shared_prompts(cfg: DatasetConfig, rng: random.Random, tokenizer, input_lens: list[int],
                   output_lens: list[int]) -> list[Prompt]:
    """Prompts of `input_lens` tokens whose first `Prompt.shared_len` tokens (round(rate x length),
    at least the run's cache-bust tag) come from one seeded text."""
    tag = bust_tag(cfg.cache_bust, "run", tokenizer) if cfg.cache_bust is not None else []
    shared = [min(n, max(round(cfg.prefix_cache_hit_rate * n), len(tag))) for n in input_lens]
    corpus = tag + units_of_len(rng, max(max(shared, default=0) - len(tag), 0), tokenizer)
    prompts = []
    for n, k, n_out in zip(input_lens, shared, output_lens, strict=True):
        text, real_len = fill_to_len(corpus[:k], n, rng, tokenizer)
        prompts.append(Prompt(text, real_len, n_out, tokenizer is not None, shared_len=k))
    return prompts


def busted(prompts: list[Prompt], salt: str, tokenizer, is_per_prompt: bool = True) -> list[Prompt]:
    """Each text prompt with a cache-bust tag before it, its own or (`is_per_prompt` False) the
    run's; its length counted again with a tokenizer, BUST_TAG_LEN more without one."""
    out = []
    for i, p in enumerate(prompts):
        tag = bust_tag(salt, str(i) if is_per_prompt else "run", tokenizer)
        if tokenizer is None:
            out.append(replace(p, prompt=" ".join(tag) + " " + p.prompt, input_len=p.input_len + BUST_TAG_LEN))
            continue
        text = tokenizer.decode(tag) + " " + p.prompt
        out.append(replace(p, prompt=text, input_len=len(tokenizer.encode(text))))
    return out


def planned_hits(warm: list[Prompt], measured: list[Prompt]) -> dict:
    """The measured prompts' planned prefix-cache hits, sent after the warm-up ones in order: each
    hits min(its shared part, the longest shared part before it) tokens; the first prompt of a cold
    cache hits nothing (a warm-up prompt fills it)."""
    longest = max((p.shared_len for p in warm), default=0)
    hits = 0
    for p in measured:
        hits += min(p.shared_len, longest)
        longest = max(longest, p.shared_len)
    total = sum(p.input_len for p in measured)
    return {"planned_cached_tokens": hits, "planned_prompt_tokens": total,
            "planned_hit_rate": hits / total if total else None}
