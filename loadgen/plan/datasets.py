"""Prompt datasets: random text, random token ids, ShareGPT JSON, shared-prefix groups, custom JSONL
files; the trace datasets (mooncake, BurstGPT) are read in loadgen/plan/traces.py. Seeded.

Random lengths follow one of two conventions (`--flags-from`), because the two upstream tools give
`--random-range-ratio` different meanings: SGLang's bench_serving draws uniform integers in
[max(int(L*r), 1), L] (r = 0 gives [1, L], mean L/2), vLLM's bench serve in
[floor(L*(1-r)), ceil(L*(1+r))] (r = 0 gives exactly L; r < 1).

Given a tokenizer (a local `tokenizer.json`, or the target's `/tokenize`: see loadgen/plan/lengths.py)
the input lengths are exact token counts; without one, text prompts are built from common English
words, one word counted as one token, `input_len` is that estimate, and the server's usage figures
give the real count.
"""

from __future__ import annotations

import json
import random

from loadgen.plan.config import DatasetConfig
from loadgen.plan.lengths import FileTokenizer, tokenizer_file
from loadgen.plan.prefix_cache import SHARING_DATASETS, busted, shared_prompts
from loadgen.plan.texts import Prompt, sample_lengths, text_of_len, texts_of_len
from loadgen.plan.traces import burstgpt_prompts, mooncake_prompts
from loadgen.plan.upstream import BUILDERS


def load_tokenizer(path: str | None):
    """A `tokenizers.Tokenizer` from a local tokenizer.json (or a directory holding one), or None."""
    if path is None:
        return None
    from tokenizers import Tokenizer

    return Tokenizer.from_file(tokenizer_file(path))


def upstream_prompts(cfg: DatasetConfig) -> str | None:
    """Whose prompts the dataset rebuilds exactly (loadgen/plan/upstream.py): "vllm" (`vllm bench
    serve`'s random), "sglang-random-ids" (bench_serving's, as text), "sglang-random" (bench_serving's
    random from a ShareGPT `dataset_path`), or None (loadgen's own). Each needs the tokenizer file:
    its vocabulary and special tokens are part of the algorithm."""
    if cfg.tokenizer_path is None or cfg.name not in ("random", "random-ids") or cfg.prefix_cache_hit_rate:
        return None
    if cfg.convention == "vllm":
        return "vllm" if cfg.name == "random" else None
    if cfg.name == "random-ids":
        return "sglang-random-ids"
    return "sglang-random" if cfg.dataset_path is not None else None


def build_prompts(cfg: DatasetConfig, tokenizer=None) -> list[Prompt]:
    """The dataset's prompts, deterministic for a given seed (and tokenizer).

    `tokenizer` (FileTokenizer or ServerTokenizer) fits text prompts to exact lengths; by default
    the `tokenizer_path` file is used when given, else lengths are estimates. A cache-bust salt
    puts a tag before each prompt, or before the shared text (loadgen/plan/prefix_cache.py)."""
    if tokenizer is None and cfg.tokenizer_path is not None:
        tokenizer = FileTokenizer(cfg.tokenizer_path)
    prompts = _built(cfg, tokenizer)
    if cfg.cache_bust is not None and not cfg.prefix_cache_hit_rate:
        return busted(prompts, cfg.cache_bust, tokenizer, cfg.name not in SHARING_DATASETS)
    return prompts


def _built(cfg: DatasetConfig, tokenizer) -> list[Prompt]:
    rng = random.Random(cfg.seed)
    upstream = upstream_prompts(cfg)
    if upstream is not None:
        return BUILDERS[upstream](cfg, tokenizer)
    if cfg.name == "random":
        return _random_text(cfg, rng, tokenizer)
    if cfg.name == "random-ids":
        return _random_ids(cfg, rng)
    if cfg.name == "sharegpt":
        return _sharegpt(cfg, rng, tokenizer)
    if cfg.name == "shared-prefix":
        return _shared_prefix(cfg, rng, tokenizer)
    if cfg.name == "custom":
        return _custom(cfg, rng, tokenizer)
    if cfg.name in ("burstgpt", "mooncake"):
        return (burstgpt_prompts if cfg.name == "burstgpt" else mooncake_prompts)(cfg, tokenizer)
    raise ValueError(f"unknown dataset {cfg.name!r}")


def _random_lengths(cfg: DatasetConfig, rng: random.Random, num_special: int = 0) -> tuple[list[int], list[int]]:
    # NOTE: vLLM's input length includes the special tokens the tokenizer adds (e.g. BOS).
    in_len = max(cfg.random_input_len - num_special, 1) if cfg.convention == "vllm" else cfg.random_input_len
    ins = sample_lengths(rng, in_len, cfg.random_range_ratio, cfg.num_prompts, cfg.convention)
    outs = sample_lengths(rng, cfg.random_output_len, cfg.random_range_ratio, cfg.num_prompts, cfg.convention)
    return ins, outs


def _random_text(cfg: DatasetConfig, rng: random.Random, tokenizer) -> list[Prompt]:
    ins, outs = _random_lengths(cfg, rng, getattr(tokenizer, "num_special_tokens", 0))
    if cfg.prefix_cache_hit_rate:
        return shared_prompts(cfg, rng, tokenizer, ins, outs)
    texts = texts_of_len(rng, ins, tokenizer)
    if cfg.random_prefix_len:
        prefix, prefix_len, exact = text_of_len(rng, cfg.random_prefix_len, tokenizer)
        texts = [(prefix + text, prefix_len + n, exact and ok) for text, n, ok in texts]
    return [Prompt(text, real_len, n_out, exact) for (text, real_len, exact), n_out in zip(texts, outs, strict=True)]


def _random_ids(cfg: DatasetConfig, rng: random.Random) -> list[Prompt]:
    if cfg.vocab_size is None:
        raise ValueError("random-ids needs the target's vocabulary size (--tokenizer or --vocab-size)")
    ins, outs = _random_lengths(cfg, rng)
    prefix = [rng.randrange(cfg.vocab_size) for _ in range(cfg.random_prefix_len)]
    return [
        Prompt(prefix + [rng.randrange(cfg.vocab_size) for _ in range(n_in)], len(prefix) + n_in, n_out, True)
        for n_in, n_out in zip(ins, outs, strict=True)
    ]


def _count(text: str, tokenizer) -> int:
    if tokenizer is None:
        return max(1, len(text) // 4)
    return len(tokenizer.encode(text))


def _sharegpt(cfg: DatasetConfig, rng: random.Random, tokenizer) -> list[Prompt]:
    with open(cfg.dataset_path, encoding="utf-8") as f:
        data = json.load(f)
    pairs = [
        (d["conversations"][0]["value"], d["conversations"][1]["value"])
        for d in data
        if len(d.get("conversations", [])) >= 2
    ]
    rng.shuffle(pairs)
    prompts = []
    for question, answer in pairs:
        n_in = _count(question, tokenizer)
        n_out = cfg.sharegpt_output_len or _count(answer, tokenizer)
        if n_in < 4 or n_out < 4:
            continue
        prompts.append(Prompt(question, n_in, n_out, tokenizer is not None))
        if len(prompts) == cfg.num_prompts:
            break
    if not prompts:
        raise ValueError(f"no usable conversations in {cfg.dataset_path}")
    return prompts


def _shared_prefix(cfg: DatasetConfig, rng: random.Random, tokenizer) -> list[Prompt]:
    prefixes = texts_of_len(rng, [cfg.shared_prefix_len] * cfg.shared_prefix_groups, tokenizer)
    questions = texts_of_len(rng, [cfg.random_input_len] * cfg.num_prompts, tokenizer)
    prompts = []
    for i, (question, q_len, _) in enumerate(questions):
        prefix, prefix_len, exact = prefixes[i % cfg.shared_prefix_groups]
        prompts.append(Prompt(prefix + "\n" + question, prefix_len + q_len, cfg.random_output_len, exact))
    return prompts


def _custom(cfg: DatasetConfig, rng: random.Random, tokenizer) -> list[Prompt]:
    """vLLM's custom JSONL: one {"prompt": ..., "output_tokens": N (optional)} per line, sent unchanged."""
    rows = []
    with open(cfg.dataset_path, encoding="utf-8") as f:
        for num, line in enumerate(f, 1):
            if line.strip():
                row = json.loads(line)
                if not isinstance(row, dict) or not isinstance(row.get("prompt"), str):
                    raise ValueError(f"line {num} of {cfg.dataset_path} has no string 'prompt'")
                rows.append(row)
    if not cfg.disable_shuffle:
        rng.shuffle(rows)
    prompts = []
    for row in rows[: cfg.num_prompts]:
        n_out = cfg.custom_output_len or row.get("output_tokens")
        if not isinstance(n_out, int) or n_out < 1:
            raise ValueError("a custom line without an integer 'output_tokens' needs --custom-output-len")
        prompts.append(Prompt(row["prompt"], _count(row["prompt"], tokenizer), n_out, tokenizer is not None))
    if not prompts:
        raise ValueError(f"no prompts in {cfg.dataset_path}")
    return prompts
