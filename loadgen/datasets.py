"""Prompt datasets: random text, random token ids, ShareGPT JSON files, shared-prefix groups. Seeded.

Given a tokenizer (a local `tokenizer.json`, or the target's `/tokenize`: see loadgen/lengths.py)
the input lengths are exact token counts; without one, text prompts are built from common English
words, one word counted as one token, `input_len` is that estimate, and the server's usage figures
give the real count.
"""

from __future__ import annotations

import json
import random
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from loadgen.lengths import FileTokenizer, fit_to_len

SERVER_FIT_THREADS = 8
_WORDS = (
    "the of and to in is was for on that with as by at from his it an were are which this be "
    "have had one not but all new first two may been time would after can more other when city "
    "there into most made used such over also later only she some world many these year under"
).split()


@dataclass(frozen=True)
class Prompt:
    """One request's input: text (or token ids) and the lengths it asks for."""

    prompt: str | list[int]
    input_len: int
    output_len: int
    is_exact_input_len: bool


@dataclass(frozen=True)
class DatasetConfig:
    """Which dataset and its parameters (flag names follow SGLang's bench_serving)."""

    name: str = "random"
    num_prompts: int = 1000
    random_input_len: int = 1024
    random_output_len: int = 1024
    random_range_ratio: float = 0.0
    dataset_path: str | None = None
    sharegpt_output_len: int | None = None
    shared_prefix_groups: int = 8
    shared_prefix_len: int = 512
    tokenizer_path: str | None = None
    use_server_tokenize: bool = True
    vocab_size: int = 32000
    seed: int = 1

    def __post_init__(self) -> None:
        if not 0.0 <= self.random_range_ratio <= 1.0:
            raise ValueError("random_range_ratio must be in [0, 1]")
        if self.name == "sharegpt" and not self.dataset_path:
            raise ValueError("--dataset sharegpt needs --dataset-path")
        if self.num_prompts < 1 or self.random_input_len < 1 or self.random_output_len < 1:
            raise ValueError("num_prompts and random lengths must be >= 1")


def sample_lengths(rng: random.Random, length: int, ratio: float, num: int) -> list[int]:
    """Uniform integers in [max(int(length * ratio), 1), length], as upstream."""
    low = max(int(length * ratio), 1)
    return [rng.randint(low, length) for _ in range(num)]


def load_tokenizer(path: str | None):
    """A `tokenizers.Tokenizer` from a local tokenizer.json, or None."""
    if path is None:
        return None
    from tokenizers import Tokenizer

    return Tokenizer.from_file(path)


def build_prompts(cfg: DatasetConfig, tokenizer=None) -> list[Prompt]:
    """The dataset's prompts, deterministic for a given seed (and tokenizer).

    `tokenizer` (FileTokenizer or ServerTokenizer) fits text prompts to exact lengths; by default
    the `tokenizer_path` file is used when given, else lengths are estimates."""
    rng = random.Random(cfg.seed)
    if tokenizer is None and cfg.tokenizer_path is not None:
        tokenizer = FileTokenizer(cfg.tokenizer_path)
    if cfg.name == "random":
        return _random_text(cfg, rng, tokenizer)
    if cfg.name == "random-ids":
        return _random_ids(cfg, rng)
    if cfg.name == "sharegpt":
        return _sharegpt(cfg, rng, tokenizer)
    if cfg.name == "shared-prefix":
        return _shared_prefix(cfg, rng, tokenizer)
    raise ValueError(f"unknown dataset {cfg.name!r}")


def _words(rng: random.Random, num: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(num))


def _text_of_len(rng: random.Random, num_tokens: int, tokenizer) -> tuple[str, int, bool]:
    if tokenizer is None:
        return _words(rng, num_tokens), num_tokens, False
    if isinstance(tokenizer, FileTokenizer):
        vocab = tokenizer.tokenizer.get_vocab_size()
        ids = tokenizer.encode(tokenizer.decode([rng.randrange(vocab) for _ in range(num_tokens)]))
    else:
        ids = tokenizer.encode(_words(rng, num_tokens))
    while len(ids) < num_tokens:
        ids += tokenizer.encode(" " + _words(rng, num_tokens - len(ids)))
    text, real_len = fit_to_len(ids, num_tokens, tokenizer, lambda: " " + _words(rng, 1))
    return text, real_len, True


def _texts_of_len(rng: random.Random, lengths: list[int], tokenizer) -> list[tuple[str, int, bool]]:
    """One text per length; through a server tokenizer, several fits run at once (round trips)."""
    if tokenizer is None or isinstance(tokenizer, FileTokenizer):
        return [_text_of_len(rng, n, tokenizer) for n in lengths]
    # NOTE: each prompt gets its own seeded generator, so the result does not depend on the order
    # in which the threads finish.
    seeds = [rng.getrandbits(64) for _ in lengths]
    with ThreadPoolExecutor(SERVER_FIT_THREADS) as pool:
        return list(pool.map(lambda n, seed: _text_of_len(random.Random(seed), n, tokenizer), lengths, seeds))


def _random_text(cfg: DatasetConfig, rng: random.Random, tokenizer) -> list[Prompt]:
    ins = sample_lengths(rng, cfg.random_input_len, cfg.random_range_ratio, cfg.num_prompts)
    outs = sample_lengths(rng, cfg.random_output_len, cfg.random_range_ratio, cfg.num_prompts)
    texts = _texts_of_len(rng, ins, tokenizer)
    return [Prompt(text, real_len, n_out, exact) for (text, real_len, exact), n_out in zip(texts, outs, strict=True)]


def _random_ids(cfg: DatasetConfig, rng: random.Random) -> list[Prompt]:
    ins = sample_lengths(rng, cfg.random_input_len, cfg.random_range_ratio, cfg.num_prompts)
    outs = sample_lengths(rng, cfg.random_output_len, cfg.random_range_ratio, cfg.num_prompts)
    return [
        Prompt([rng.randrange(cfg.vocab_size) for _ in range(n_in)], n_in, n_out, True)
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
    prefixes = _texts_of_len(rng, [cfg.shared_prefix_len] * cfg.shared_prefix_groups, tokenizer)
    questions = _texts_of_len(rng, [cfg.random_input_len] * cfg.num_prompts, tokenizer)
    prompts = []
    for i, (question, q_len, _) in enumerate(questions):
        prefix, prefix_len, exact = prefixes[i % cfg.shared_prefix_groups]
        prompts.append(Prompt(prefix + "\n" + question, prefix_len + q_len, cfg.random_output_len, exact))
    return prompts
