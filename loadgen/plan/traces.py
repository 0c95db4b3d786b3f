"""Mooncake traces: one JSON object per line, `timestamp` (ms after the first line), `input_length`,
`output_length` and `hash_ids` (the Mooncake FAST'25 format, as SGLang's `--dataset-name mooncake`,
AIPerf's `mooncake_trace` and vLLM's `timed-trace` read it).

Each distinct hash id stands for one block of `block_size` tokens (512 in the Mooncake traces): it
maps to one deterministic block of text, so requests that share their first k ids share a prefix
of k blocks; the last block is cut where `input_length` ends inside it, and past the blocks the
prompt is unique filler. With a tokenizer the lengths are exact; without one, one word per token.
"""

from __future__ import annotations

import json
import random

from loadgen.plan.datasets import DatasetConfig, Prompt, _text_of_len, _words
from loadgen.plan.lengths import fit_to_len

_FIELDS = {"timestamp": (int, float), "input_length": int, "output_length": int}


def read_trace(path: str, num: int | None) -> list[dict]:
    """The first `num` lines (all when None), checked; ValueError naming the first bad line."""
    rows: list[dict] = []
    with open(path, encoding="utf-8") as f:
        for line_num, line in enumerate(f, 1):
            if not line.strip():
                continue
            row = _check_row(line, line_num, path)
            if rows and row["timestamp"] < rows[-1]["timestamp"]:
                raise ValueError(f"line {line_num} of {path}: timestamp {row['timestamp']} is before the "
                                 f"previous request's {rows[-1]['timestamp']} (a trace is in time order)")
            rows.append(row)
            if num is not None and len(rows) == num:
                break
    if not rows:
        raise ValueError(f"no requests in {path}")
    if num is not None and len(rows) < num:
        raise ValueError(f"{path} has {len(rows)} requests; {num} were asked for (--num-prompts, --warmup)")
    return rows


def _check_row(line: str, line_num: int, path: str) -> dict:
    where = f"line {line_num} of {path}"
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{where} is not JSON: {exc}") from None
    if not isinstance(row, dict):
        raise ValueError(f"{where} is not a JSON object")
    for name, kind in _FIELDS.items():
        value = row.get(name)
        if not isinstance(value, kind) or isinstance(value, bool) or value < 0:
            raise ValueError(f"{where}: {name!r} must be a number >= 0, got {value!r}")
    if row["input_length"] < 1 or row["output_length"] < 1:
        raise ValueError(f"{where}: input_length and output_length must be >= 1")
    ids = row.get("hash_ids", [])
    if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise ValueError(f"{where}: 'hash_ids' must be a list of integers, got {ids!r}")
    return row


class _Blocks:
    """One deterministic block per hash id (seeded by the id), as token ids or as words."""

    def __init__(self, cfg: DatasetConfig, tokenizer) -> None:
        self.cfg, self.tokenizer = cfg, tokenizer
        self.cache: dict[int, list] = {}

    def get(self, hash_id: int) -> list:
        if hash_id not in self.cache:
            rng = random.Random(f"mooncake-{self.cfg.seed}-{hash_id}")
            if self.tokenizer is None:
                self.cache[hash_id] = _words(rng, self.cfg.block_size).split()
            else:
                text, _, _ = _text_of_len(rng, self.cfg.block_size, self.tokenizer)
                self.cache[hash_id] = self.tokenizer.encode(text)
        return self.cache[hash_id]


def _prompt_text(row: dict, blocks: _Blocks, rng: random.Random, tokenizer) -> tuple[str, int]:
    """The hash blocks in order, cut at input_length, then unique filler up to it."""
    n = row["input_length"]
    units: list = []
    for hash_id in row.get("hash_ids", []):
        if len(units) >= n:
            break
        units += blocks.get(hash_id)
    units = units[:n]
    if tokenizer is None:
        filler = _words(rng, n - len(units)).split() if n > len(units) else []
        return " ".join(units + filler), n
    if n > len(units):
        units += tokenizer.encode(" " + _text_of_len(rng, n - len(units), tokenizer)[0])
    return fit_to_len(units, n, tokenizer, lambda: " " + _words(rng, 1))


def mooncake_prompts(cfg: DatasetConfig, tokenizer) -> list[Prompt]:
    """The trace's first `num_prompts` lines (all when None) as prompts with their arrival times."""
    rows = read_trace(cfg.dataset_path, cfg.num_prompts)
    blocks = _Blocks(cfg, tokenizer)
    first = rows[0]["timestamp"]
    prompts = []
    for i, row in enumerate(rows):
        rng = random.Random(f"mooncake-filler-{cfg.seed}-{i}")
        text, real_len = _prompt_text(row, blocks, rng, tokenizer)
        arrival = (row["timestamp"] - first) / 1e3 if cfg.trace_timestamps else None
        prompts.append(Prompt(text, real_len, row["output_length"], tokenizer is not None, arrival))
    return prompts
