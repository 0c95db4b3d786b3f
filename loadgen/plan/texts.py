"""Prompt text of a given token length, and the Prompt every dataset builds.

Without a tokenizer, text is common English words, one word counted as one token; with one (a
FileTokenizer or the target's /tokenize, loadgen/plan/lengths.py) it is fitted to exact lengths.
"""

from __future__ import annotations

import math
import random
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from loadgen.plan.lengths import FileTokenizer, fit_to_len

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
    arrival_s: float | None = None  # a trace's arrival time, seconds after its first request
    shared_len: int = 0  # leading tokens taken from the run's shared text (--prefix-cache-hit-rate)


def length_range(length: int, ratio: float, convention: str = "sglang") -> tuple[int, int]:
    """The inclusive range random lengths are drawn from, as the convention's upstream draws them."""
    if convention == "vllm":
        return max(math.floor(length * (1 - ratio)), 1), max(math.ceil(length * (1 + ratio)), 1)
    return max(int(length * ratio), 1), length


def sample_lengths(rng: random.Random, length: int, ratio: float, num: int, convention: str = "sglang") -> list[int]:
    """Uniform integers in `length_range(length, ratio, convention)`."""
    low, high = length_range(length, ratio, convention)
    return [rng.randint(low, high) for _ in range(num)]


def random_words(rng: random.Random, num: int) -> str:
    """`num` common English words, each counted as one token where no tokenizer is given."""
    return " ".join(rng.choice(_WORDS) for _ in range(num))


def text_of_len(rng: random.Random, num_tokens: int, tokenizer) -> tuple[str, int, bool]:
    """(text, its length, whether that length is exact): fitted through `tokenizer`, else words."""
    if tokenizer is None:
        return random_words(rng, num_tokens), num_tokens, False
    if isinstance(tokenizer, FileTokenizer):
        vocab = tokenizer.tokenizer.get_vocab_size()
        ids = tokenizer.encode(tokenizer.decode([rng.randrange(vocab) for _ in range(num_tokens)]))
    else:
        ids = tokenizer.encode(random_words(rng, num_tokens))
    while len(ids) < num_tokens:
        ids += tokenizer.encode(" " + random_words(rng, num_tokens - len(ids)))
    text, real_len = fit_to_len(ids, num_tokens, tokenizer, lambda: " " + random_words(rng, 1))
    return text, real_len, True


def texts_of_len(rng: random.Random, lengths: list[int], tokenizer) -> list[tuple[str, int, bool]]:
    """One text per length; through a server tokenizer, several fits run at once (round trips)."""
    if tokenizer is None or isinstance(tokenizer, FileTokenizer):
        return [text_of_len(rng, n, tokenizer) for n in lengths]
    # NOTE: each prompt gets its own seeded generator, so the result does not depend on the order
    # in which the threads finish.
    seeds = [rng.getrandbits(64) for _ in lengths]
    with ThreadPoolExecutor(SERVER_FIT_THREADS) as pool:
        return list(pool.map(lambda n, seed: text_of_len(random.Random(seed), n, tokenizer), lengths, seeds))


def fill_to_len(units: list, num_tokens: int, rng: random.Random, tokenizer) -> tuple[str, int]:
    """Text of `num_tokens` tokens that starts with `units` (words without a tokenizer, token ids
    with one), topped up with random words; returns the text and its length (exact with a tokenizer)."""
    if tokenizer is None:
        filler = random_words(rng, num_tokens - len(units)).split() if num_tokens > len(units) else []
        return " ".join(units + filler), num_tokens
    if num_tokens > len(units):
        units = units + tokenizer.encode(" " + text_of_len(rng, num_tokens - len(units), tokenizer)[0])
    return fit_to_len(units, num_tokens, tokenizer, lambda: " " + random_words(rng, 1))


def units_of_len(rng: random.Random, num_tokens: int, tokenizer) -> list:
    """`num_tokens` random units: words without a tokenizer, token ids of a fitted text with one."""
    if tokenizer is None:
        return random_words(rng, num_tokens).split()
    return tokenizer.encode(text_of_len(rng, num_tokens, tokenizer)[0])
