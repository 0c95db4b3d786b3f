"""Trace datasets, read line by line with every field they use checked: Mooncake JSONL and BurstGPT CSV.

Mooncake traces: one JSON object per line, `timestamp` (ms after the first line), `input_length`,
`output_length` and `hash_ids` (the Mooncake FAST'25 format, as SGLang's `--dataset-name mooncake`,
AIPerf's `mooncake_trace` and vLLM's `timed-trace` read it). Each distinct hash id stands for one
block of `block_size` tokens (512 in the Mooncake traces): it maps to one deterministic block of
text, so requests that share their first k ids share a prefix of k blocks; the last block is cut
where `input_length` ends inside it, and past the blocks the prompt is unique filler. With a
tokenizer the lengths are exact; without one, one word per token.

BurstGPT: the CSV's GPT-4 rows with a response (vLLM's filter), `Timestamp` in seconds. Replay takes
the first N such rows and stops reading there; sampling (vLLM's meaning, with --request-rate) keeps
a seeded uniform sample of N rows (a reservoir), so memory grows with N, never with the file.

A bad line is a set-up error naming it: timestamps finite, >= 0, in time order and at most
MAX_TRACE_SPAN_S after the first request's; lengths integers in [1, bound], the bound being the
model's context where the server's /tokenize reports it (max_model_len), at most MAX_TRACE_LEN.
"""

from __future__ import annotations

import csv
import itertools
import json
import math
import random
from collections.abc import Iterator

from loadgen.plan.config import DatasetConfig
from loadgen.plan.texts import Prompt, fill_to_len, random_words, text_of_len, texts_of_len

#: The longest input or output length a trace line may ask for: the model's context where known,
#: else this (2^20 tokens: past the contexts served today; without a tokenizer such a prompt is
#: about 6 MB of text, and its request body as much again).
MAX_TRACE_LEN = 1 << 20
#: The longest a trace may span, in seconds from its first request (past any published trace:
#: BurstGPT's covers 121 days); a later timestamp is refused, not a replay that never ends.
MAX_TRACE_SPAN_S = 1e8
BURSTGPT_MODEL = "GPT-4"


def length_bound(tokenizer) -> tuple[int, str]:
    """The longest length a trace line may ask for, and what sets it (said in the error)."""
    context = getattr(tokenizer, "max_model_len", None)
    if context is not None and context < MAX_TRACE_LEN:
        return context, "the model's context (max_model_len from the server's /tokenize)"
    return MAX_TRACE_LEN, "loadgen's cap on a trace length (MAX_TRACE_LEN)"


def _check_length(value, name: str, where: str, bound: tuple[int, str]) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{where}: {name!r} must be an integer >= 1, got {value!r}")
    if value > bound[0]:
        raise ValueError(f"{where}: {name!r} {value} is above {bound[1]}, {bound[0]}")
    return value


class _TimeOrder:
    """Checks a trace's timestamps line by line (`unit_s`: seconds per timestamp unit)."""

    def __init__(self, unit_s: float) -> None:
        self.unit_s = unit_s
        self.first: float | None = None
        self.prev: float | None = None

    def check(self, ts, where: str) -> float:
        """`ts` when it is a finite number >= 0, not before the previous line's and within the span."""
        if not isinstance(ts, int | float) or isinstance(ts, bool) or not _is_finite(ts) or ts < 0:
            raise ValueError(f"{where}: 'timestamp' must be a finite number >= 0, got {ts!r}")
        if self.prev is not None and ts < self.prev:
            raise ValueError(f"{where}: timestamp {ts} is before the previous request's {self.prev} "
                             "(a trace is in time order)")
        self.first = ts if self.first is None else self.first
        if (ts - self.first) * self.unit_s > MAX_TRACE_SPAN_S:
            raise ValueError(f"{where}: timestamp {ts} is {(ts - self.first) * self.unit_s:.3g} s after the "
                             f"first request's; a trace spans at most MAX_TRACE_SPAN_S = {MAX_TRACE_SPAN_S:g} s")
        self.prev = ts
        return ts


def _is_finite(value: int | float) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:  # an integer past the float range
        return False


def read_trace(path: str, num: int | None, bound: tuple[int, str] = (MAX_TRACE_LEN, "MAX_TRACE_LEN")) -> list[dict]:
    """The first `num` lines (all when None), checked; ValueError naming the first bad line."""
    rows: list[dict] = []
    order = _TimeOrder(1e-3)
    with open(path, encoding="utf-8") as f:
        for line_num, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"line {line_num} of {path}"
            row = _check_row(line, where, bound)
            order.check(row.get("timestamp"), where)
            rows.append(row)
            if num is not None and len(rows) == num:
                break
    if not rows:
        raise ValueError(f"no requests in {path}")
    if num is not None and len(rows) < num:
        raise ValueError(f"{path} has {len(rows)} requests; {num} were asked for (--num-prompts, --warmup)")
    return rows


def _check_row(line: str, where: str, bound: tuple[int, str]) -> dict:
    try:
        row = json.loads(line)
    except (ValueError, RecursionError) as exc:  # NOTE: also a number past int's digit limit, deep nesting
        raise ValueError(f"{where} is not JSON that loadgen reads: {type(exc).__name__}: {exc}") from None
    if not isinstance(row, dict):
        raise ValueError(f"{where} is not a JSON object")
    for name in ("input_length", "output_length"):
        _check_length(row.get(name), name, where, bound)
    ids = row.get("hash_ids", [])
    if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise ValueError(f"{where}: 'hash_ids' must be a list of integers, got {ids!r}")
    return row


class _Blocks:
    """One deterministic block per hash id (seeded by the id), as token ids or as words.

    Without a tokenizer a block is drawn word by word and built only as far as a prompt has used it
    (its first k words do not depend on how many follow); with one it is fitted once, at
    min(block_size, the length bound) tokens (no prompt is longer)."""

    def __init__(self, cfg: DatasetConfig, tokenizer, max_len: int) -> None:
        self.cfg, self.tokenizer = cfg, tokenizer
        self.size = cfg.block_size if tokenizer is None else min(cfg.block_size, max_len)
        self.cache: dict[int, list] = {}
        self.drawing: dict[int, random.Random] = {}  # word blocks not yet drawn to their full size

    def _rng(self, hash_id: int) -> random.Random:
        return random.Random(f"mooncake-{self.cfg.seed}-{hash_id}")

    def get(self, hash_id: int, need: int) -> list:
        """The block's first min(need, block size) units."""
        if self.tokenizer is not None:
            if hash_id not in self.cache:
                text, _, _ = text_of_len(self._rng(hash_id), self.size, self.tokenizer)
                self.cache[hash_id] = self.tokenizer.encode(text)
            return self.cache[hash_id][:need]
        words = self.cache.setdefault(hash_id, [])
        want = min(need, self.size)
        if len(words) < want:
            rng = self.drawing.setdefault(hash_id, self._rng(hash_id))
            words += random_words(rng, want - len(words)).split()
            if len(words) == self.size:
                del self.drawing[hash_id]
        return words[:want]


def _prompt_text(row: dict, blocks: _Blocks, rng: random.Random, tokenizer) -> tuple[str, int]:
    """The hash blocks in order, cut at input_length, then unique filler up to it."""
    n = row["input_length"]
    units: list = []
    for hash_id in row.get("hash_ids", []):
        if len(units) >= n:
            break
        units += blocks.get(hash_id, n - len(units))
    return fill_to_len(units, n, rng, tokenizer)


def mooncake_prompts(cfg: DatasetConfig, tokenizer) -> list[Prompt]:
    """The trace's first `num_prompts` lines (all when None) as prompts with their arrival times."""
    bound = length_bound(tokenizer)
    rows = read_trace(cfg.dataset_path, cfg.num_prompts, bound)
    blocks = _Blocks(cfg, tokenizer, bound[0])
    first = rows[0]["timestamp"]
    prompts = []
    for i, row in enumerate(rows):
        rng = random.Random(f"mooncake-filler-{cfg.seed}-{i}")
        text, real_len = _prompt_text(row, blocks, rng, tokenizer)
        arrival = (row["timestamp"] - first) / 1e3 if cfg.trace_timestamps else None
        prompts.append(Prompt(text, real_len, row["output_length"], tokenizer is not None, arrival))
    return prompts


def burstgpt_prompts(cfg: DatasetConfig, tokenizer) -> list[Prompt]:
    """BurstGPT's CSV as vLLM reads it: GPT-4 rows with a response, their request/response token counts.

    With `trace_timestamps` (replay, as AIPerf) the first rows, in time order, each with its
    `Timestamp` (seconds) relative to the first; else a seeded sample of rows, as vLLM samples them."""
    rng = random.Random(cfg.seed)
    rows = _burstgpt_rows(cfg.dataset_path, length_bound(tokenizer), cfg.trace_timestamps)
    if cfg.trace_timestamps:
        picked = list(itertools.islice(rows, cfg.num_prompts))
        arrivals = [ts - picked[0][0] for ts, _, _ in picked]
    else:
        picked = _sample(rng, rows, cfg.num_prompts)
        arrivals = [None] * len(picked)
    if not picked:
        raise ValueError(f"no {BURSTGPT_MODEL} rows with response tokens in {cfg.dataset_path}")
    texts = texts_of_len(rng, [n_in for _, n_in, _ in picked], tokenizer)
    return [Prompt(text, n, n_out, exact, at)
            for (text, n, exact), (_, _, n_out), at in zip(texts, picked, arrivals, strict=True)]


def _burstgpt_rows(path: str, bound: tuple[int, str], with_time: bool) -> Iterator[tuple[float | None, int, int]]:
    """(timestamp, request tokens, response tokens) of each GPT-4 row with a response, in file order,
    checked; the timestamp (None without `with_time`) must keep the rows in time order."""
    order = _TimeOrder(1.0)
    with open(path, encoding="utf-8", newline="") as f:
        reader = csv.reader(f)
        try:
            column = {name: i for i, name in enumerate(next(reader, []))}
            model = column.get("Model")
            for row in reader:
                if model is None or model >= len(row) or row[model] != BURSTGPT_MODEL:
                    continue
                where = f"line {reader.line_num} of {path}"
                cells = {name: row[i] if i < len(row) else "" for name, i in column.items()}
                n_out = _csv_number(cells, "Response tokens", where, bound, missing=0.0)
                if n_out < 1:
                    continue  # NOTE: vLLM's filter: a row without a response is not replayed
                n_in = max(_csv_number(cells, "Request tokens", where, bound), 1)
                ts = order.check(_csv_number(cells, "Timestamp", where), where) if with_time else None
                yield ts, n_in, n_out
        except csv.Error as exc:
            raise ValueError(f"line {reader.line_num} of {path} is not CSV: {exc}") from None


def _csv_number(cells: dict, name: str, where: str, bound: tuple[int, str] | None = None,
                missing: float | None = None) -> float:
    """A finite number from a CSV cell (a count: an integer, at most the bound)."""
    text = cells.get(name, "").strip()
    if not text and missing is not None:
        return missing
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{where}: {name!r} is not a number: {text!r}") from None
    if not math.isfinite(value):
        raise ValueError(f"{where}: {name!r} must be a finite number, got {text!r}")
    if bound is None:
        return value
    if value > bound[0]:
        raise ValueError(f"{where}: {name!r} {text} is above {bound[1]}, {bound[0]}")
    return int(value)


def _sample(rng: random.Random, rows: Iterator, num: int | None) -> list:
    """A seeded uniform sample of `num` rows without replacement, kept in a reservoir (memory for
    `num` rows, not the file); with replacement when the file has fewer (as vLLM samples)."""
    if num is None:
        return list(rows)
    kept: list = []
    seen = 0
    for seen, row in enumerate(rows, 1):
        if seen <= num:
            kept.append(row)
        elif (j := rng.randrange(seen)) < num:
            kept[j] = row
    if seen < num:
        return [kept[rng.randrange(len(kept))] for _ in range(num)] if kept else []
    rng.shuffle(kept)
    return kept
