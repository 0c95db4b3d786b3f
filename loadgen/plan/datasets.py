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
import math
import random
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from loadgen.plan.lengths import FileTokenizer, fit_to_len, tokenizer_file

SERVER_FIT_THREADS = 8
CONVENTIONS = ("sglang", "vllm")
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
    #: random-ids draws from [0, vocab_size): the target's vocabulary (no default: a guessed one sent
    #: ids the reference server refuses); the runner sets it from --tokenizer, --vocab-size or the server.
    vocab_size: int | None = None
    seed: int = 1
    convention: str = "sglang"
    random_prefix_len: int = 0
    custom_output_len: int | None = None
    disable_shuffle: bool = False
    block_size: int = 512  # tokens per mooncake hash id
    trace_timestamps: bool = False  # keep the trace's order and times (replay)
    multi_turn_num_turns: int | None = None  # None: 3 synthetic turns, every human turn of a file
    multi_turn_user_len: int = 128
    multi_turn_think_time_s: float = 0.0
    #: A session's conversation (user turns and answers, UTF-8 bytes) past which no turn is sent.
    multi_turn_max_context_bytes: int = 8 << 20

    def __post_init__(self) -> None:
        if self.convention not in CONVENTIONS:
            raise ValueError(f"convention must be one of {CONVENTIONS}")
        top = 1.0 if self.convention == "sglang" else math.nextafter(1.0, 0.0)
        if not 0.0 <= self.random_range_ratio <= top:
            raise ValueError(f"random_range_ratio must be in [0, 1{']' if top == 1.0 else ')'} "
                             f"({self.convention} convention)")
        if self.name in ("sharegpt", "custom", "burstgpt", "mooncake") and not self.dataset_path:
            raise ValueError(f"--dataset {self.name} needs --dataset-path")
        if self.vocab_size is not None and self.vocab_size < 1:
            raise ValueError("vocab_size must be >= 1")
        if self.random_prefix_len < 0 or (self.custom_output_len is not None and self.custom_output_len < 1):
            raise ValueError("random_prefix_len must be >= 0 and custom_output_len >= 1")
        if (self.num_prompts is not None and self.num_prompts < 1) or self.random_input_len < 1 \
                or self.random_output_len < 1:
            raise ValueError("num_prompts and random lengths must be >= 1")
        turns_bad = self.multi_turn_num_turns is not None and self.multi_turn_num_turns < 1
        if self.block_size < 1 or turns_bad or self.multi_turn_user_len < 1:
            raise ValueError("block_size, multi_turn_num_turns and multi_turn_user_len must be >= 1")
        if self.multi_turn_think_time_s < 0 or self.multi_turn_max_context_bytes < 1:
            raise ValueError("multi_turn_think_time_s must be >= 0 and multi_turn_max_context_bytes >= 1")


def length_range(length: int, ratio: float, convention: str = "sglang") -> tuple[int, int]:
    """The inclusive range random lengths are drawn from, as the convention's upstream draws them."""
    if convention == "vllm":
        return max(math.floor(length * (1 - ratio)), 1), max(math.ceil(length * (1 + ratio)), 1)
    return max(int(length * ratio), 1), length


def sample_lengths(rng: random.Random, length: int, ratio: float, num: int, convention: str = "sglang") -> list[int]:
    """Uniform integers in `length_range(length, ratio, convention)`."""
    low, high = length_range(length, ratio, convention)
    return [rng.randint(low, high) for _ in range(num)]


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
    if cfg.tokenizer_path is None or cfg.name not in ("random", "random-ids"):
        return None
    if cfg.convention == "vllm":
        return "vllm" if cfg.name == "random" else None
    if cfg.name == "random-ids":
        return "sglang-random-ids"
    return "sglang-random" if cfg.dataset_path is not None else None


def build_prompts(cfg: DatasetConfig, tokenizer=None) -> list[Prompt]:
    """The dataset's prompts, deterministic for a given seed (and tokenizer).

    `tokenizer` (FileTokenizer or ServerTokenizer) fits text prompts to exact lengths; by default
    the `tokenizer_path` file is used when given, else lengths are estimates."""
    rng = random.Random(cfg.seed)
    if tokenizer is None and cfg.tokenizer_path is not None:
        tokenizer = FileTokenizer(cfg.tokenizer_path)
    upstream = upstream_prompts(cfg)
    if upstream is not None:
        # NOTE: imported here: upstream.py uses this module's Prompt and length_range.
        from loadgen.plan.upstream import BUILDERS

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
        # NOTE: imported here: traces.py uses this module's helpers.
        from loadgen.plan.traces import burstgpt_prompts, mooncake_prompts

        return (burstgpt_prompts if cfg.name == "burstgpt" else mooncake_prompts)(cfg, tokenizer)
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


def _random_lengths(cfg: DatasetConfig, rng: random.Random, num_special: int = 0) -> tuple[list[int], list[int]]:
    # NOTE: vLLM's input length includes the special tokens the tokenizer adds (e.g. BOS).
    in_len = max(cfg.random_input_len - num_special, 1) if cfg.convention == "vllm" else cfg.random_input_len
    ins = sample_lengths(rng, in_len, cfg.random_range_ratio, cfg.num_prompts, cfg.convention)
    outs = sample_lengths(rng, cfg.random_output_len, cfg.random_range_ratio, cfg.num_prompts, cfg.convention)
    return ins, outs


def _random_text(cfg: DatasetConfig, rng: random.Random, tokenizer) -> list[Prompt]:
    ins, outs = _random_lengths(cfg, rng, getattr(tokenizer, "num_special_tokens", 0))
    texts = _texts_of_len(rng, ins, tokenizer)
    if cfg.random_prefix_len:
        prefix, prefix_len, exact = _text_of_len(rng, cfg.random_prefix_len, tokenizer)
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
    prefixes = _texts_of_len(rng, [cfg.shared_prefix_len] * cfg.shared_prefix_groups, tokenizer)
    questions = _texts_of_len(rng, [cfg.random_input_len] * cfg.num_prompts, tokenizer)
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
