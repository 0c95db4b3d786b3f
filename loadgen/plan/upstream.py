"""The upstream tools' random datasets, rebuilt from their algorithms (not their code), so that loadgen
and the upstream client send the same prompts for the same seed and tokenizer:

- `vllm bench serve --dataset-name random` (vLLM 0.32.0 `RandomDataset`): `vllm_random`;
- SGLang bench_serving (0.5.23) `--dataset-name random-ids`, sent as text: `sglang_random_ids`;
- SGLang bench_serving `--dataset-name random --dataset-path SHAREGPT.json`: `sglang_random`.

Each reads the tokenizer as transformers' `AutoTokenizer` presents it (`HfView`): the base vocabulary
size, the named special tokens, decoding that keeps special tokens. The identity is checked against
the tools' own code in tests/loadgen/test_upstream.py (fixture made by scripts/upstream_prompts.py).
"""

from __future__ import annotations

import json
import math
import os
import random

import numpy as np

from loadgen.plan.config import DatasetConfig
from loadgen.plan.lengths import FileTokenizer
from loadgen.plan.texts import Prompt, length_range

#: What each `upstream_prompts` value rebuilds, as the results JSON's `dataset.prompts_from` says.
PROMPTS_FROM = {"vllm": "vllm bench serve --dataset-name random (vLLM 0.32.0 RandomDataset)",
                "sglang-random-ids": "sglang bench_serving --dataset-name random-ids (SGLang 0.5.23, text)",
                "sglang-random": "sglang bench_serving --dataset-name random --dataset-path (SGLang 0.5.23)"}
#: vLLM's retries when a decoded prompt re-tokenises to another length (gen_prompt_decode_to_target_len).
VLLM_MAX_RETRY = 10
#: transformers' named special tokens (PreTrainedTokenizerBase.SPECIAL_TOKENS_ATTRIBUTES).
NAMED_SPECIAL_TOKENS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token",
                        "mask_token")
#: transformers' clean_up_tokenization: spaces before punctuation and contractions.
_CLEAN_UP = ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"),
             (" 'm", "'m"), (" 's", "'s"), (" 've", "'ve"), (" 're", "'re"))


def _token_content(value) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return value["content"]
    return None


def _special_tokens_config(tok: FileTokenizer) -> dict:
    """tokenizer_config.json with special_tokens_map.json's entries for keys it lacks (transformers' merge)."""
    config = dict(tok.config)
    map_path = os.path.join(os.path.dirname(tok.path), "special_tokens_map.json")
    if "added_tokens_decoder" not in config and os.path.isfile(map_path):
        with open(map_path, encoding="utf-8") as f:
            for key, value in json.load(f).items():
                config.setdefault(key, value)
    return config


def _special_token_texts(config: dict) -> list[str]:
    """transformers 5's `all_special_tokens`: the named tokens, other `*_token` keys, the extra list."""
    extra = config.get("extra_special_tokens") or config.get("additional_special_tokens") or []
    named = [key for key in config if key.endswith("_token") and key not in NAMED_SPECIAL_TOKENS]
    values = [config.get(key) for key in (*NAMED_SPECIAL_TOKENS, *named)]
    values += list(extra.values()) if isinstance(extra, dict) else list(extra)
    texts = []
    for value in values:
        text = _token_content(value)
        if text is not None and text not in texts:
            texts.append(text)
    return texts


class HfView:
    """A tokenizer file as transformers' fast tokenizer (`AutoTokenizer`, transformers 5) presents it
    to the benchmark clients: `vocab_size` without added tokens, `all_special_ids` from the config's
    named special tokens (not every added token marked special), `decode` keeping special tokens."""

    def __init__(self, tok: FileTokenizer) -> None:
        self.tok = tok
        self.vocab_size = tok.tokenizer.get_vocab_size(with_added_tokens=False)
        self.num_special_tokens = tok.tokenizer.num_special_tokens_to_add(False)
        config = _special_tokens_config(tok)
        unk = self._id(_token_content(config.get("unk_token")))
        ids = [self._id(text) for text in _special_token_texts(config)]
        # NOTE: transformers maps a token missing from the vocabulary to the unknown token's id.
        self.all_special_ids = [i for i in (unk if i is None else i for i in ids) if i is not None]
        is_bpe = type(tok.tokenizer.model).__name__ == "BPE"
        force = config.get("clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output", False)
        self.clean_up = bool(config.get("clean_up_tokenization_spaces", False)) and (not is_bpe or force)

    def _id(self, text: str | None) -> int | None:
        return None if text is None else self.tok.tokenizer.token_to_id(text)

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        """Token ids of `text` (without special tokens unless asked: the clients count them so)."""
        return self.tok.tokenizer.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids: list[int]) -> str:
        """Text of `ids`, special tokens kept (transformers' default)."""
        text = self.tok.decode(ids, skip_special_tokens=False)
        if self.clean_up:
            for old, new in _CLEAN_UP:
                text = text.replace(old, new)
        return text


def vllm_random(cfg: DatasetConfig, tok: FileTokenizer) -> list[Prompt]:
    """`vllm bench serve --dataset-name random --seed S` prompts (vLLM 0.32.0 `RandomDataset.sample`):
    lengths and vocabulary offsets drawn from `numpy.random.default_rng(S)`, a fixed random prefix,
    then per request the allowed (non-special) tokens from its offset on, decoded and re-encoded
    until the text has the drawn length (or 10 tries, topping up with random ids from the same
    generator). Input lengths count the text's tokens, as vLLM's `prompt_len`."""
    hf = HfView(tok)
    rng = np.random.default_rng(cfg.seed)
    ins, outs, offsets = _vllm_lengths(rng, cfg, hf)
    # NOTE: vLLM takes the set difference; CPython iterates a set of small ints in increasing order.
    allowed = np.array(sorted(set(range(hf.vocab_size)) - set(hf.all_special_ids)))
    prefix = []
    if cfg.random_prefix_len > 0:
        picks = allowed[rng.integers(0, len(allowed), size=cfg.random_prefix_len)].tolist()
        prefix = _vllm_fit(rng, hf, picks, cfg.random_prefix_len)[1]
    prompts = []
    for i, (n_in, n_out, offset) in enumerate(zip(ins, outs, offsets, strict=True)):
        inner = allowed[(offset + i + np.arange(n_in)) % len(allowed)].tolist()
        text, ids = _vllm_fit(rng, hf, prefix + inner, cfg.random_prefix_len + n_in)
        prompts.append(Prompt(text, len(ids), n_out, True))
    return prompts


def _vllm_lengths(rng: np.random.Generator, cfg: DatasetConfig, hf: HfView) -> tuple[list[int], list[int], list[int]]:
    """Input lengths (special tokens taken off), output lengths and offsets, drawn in vLLM's order."""
    ratio = cfg.random_range_ratio
    real_input_len = max(0, cfg.random_input_len - hf.num_special_tokens)
    in_low, in_high = math.floor(real_input_len * (1 - ratio)), math.ceil(real_input_len * (1 + ratio))
    if cfg.random_prefix_len + in_low < 1:
        raise ValueError(f"--random-input-len {cfg.random_input_len} is too small: less the tokenizer's "
                         f"{hf.num_special_tokens} special token(s) and the range ratio, a prompt could be empty")
    out_low, out_high = length_range(cfg.random_output_len, ratio, "vllm")
    ins = rng.integers(in_low, in_high + 1, size=cfg.num_prompts)
    outs = rng.integers(out_low, out_high + 1, size=cfg.num_prompts)
    offsets = rng.integers(0, hf.vocab_size, size=cfg.num_prompts)
    return ins.tolist(), outs.tolist(), offsets.tolist()


def _vllm_fit(rng: np.random.Generator, hf: HfView, ids: list[int], target_len: int) -> tuple[str, list[int]]:
    """vLLM's gen_prompt_decode_to_target_len: the text and its ids after decode/re-encode rounds."""
    for tries_left in range(VLLM_MAX_RETRY, -1, -1):
        text = hf.decode(ids)
        ids = hf.encode(text)
        if tries_left == 0 or len(ids) == target_len:
            break
        if len(ids) < target_len:
            ids += rng.integers(0, hf.vocab_size, size=target_len - len(ids)).tolist()
        else:
            ids = ids[:target_len]
    return text, ids


def sglang_random_ids(cfg: DatasetConfig, tok: FileTokenizer) -> list[Prompt]:
    """SGLang bench_serving `--dataset-name random-ids --seed S` prompts, sent as text (its default,
    without `--tokenize-prompt`): request i is the ids (offset + i + j) mod vocab_size, decoded.
    SGLang counts the drawn length; loadgen the text's tokens."""
    hf = HfView(tok)
    legacy = np.random.RandomState(cfg.seed)
    ins, outs = _sglang_lengths(legacy, cfg, hf)
    offsets = legacy.randint(0, hf.vocab_size, size=cfg.num_prompts).tolist()
    prompts = []
    for i, (n_in, n_out, offset) in enumerate(zip(ins, outs, offsets, strict=True)):
        text = hf.decode([(offset + i + j) % hf.vocab_size for j in range(n_in)])
        prompts.append(Prompt(text, len(hf.encode(text)), n_out, True))
    return prompts


def sglang_random(cfg: DatasetConfig, tok: FileTokenizer) -> list[Prompt]:
    """SGLang bench_serving `--dataset-name random --dataset-path SHAREGPT.json --seed S` prompts: the
    conversations' first turns shuffled by Python's generator seeded with S, each one's ids (special
    tokens included) repeated or cut to the drawn length and decoded; empty ones skipped."""
    hf = HfView(tok)
    ins, outs = _sglang_lengths(np.random.RandomState(cfg.seed), cfg, hf)
    questions = _sharegpt_questions(cfg.dataset_path)
    random.Random(cfg.seed).shuffle(questions)
    prompts = []
    for question in questions:
        if len(prompts) == cfg.num_prompts:
            break
        ids = hf.encode(question, add_special_tokens=True)
        if ids:
            n_in = ins[len(prompts)]
            text = hf.decode((ids * math.ceil(n_in / len(ids)))[:n_in])
            prompts.append(Prompt(text, len(hf.encode(text)), outs[len(prompts)], True))
    if not prompts:
        raise ValueError(f"no usable conversations in {cfg.dataset_path}")
    return prompts


def _sglang_lengths(legacy: np.random.RandomState, cfg: DatasetConfig, hf: HfView) -> tuple[list[int], list[int]]:
    """Input lengths less the special tokens (at least 1) and output lengths, from numpy's legacy
    generator (SGLang seeds the global one, `np.random.seed(S)`) in SGLang's order."""
    lengths = []
    for length in (cfg.random_input_len, cfg.random_output_len):
        low, high = length_range(length, cfg.random_range_ratio, "sglang")
        lengths.append(legacy.randint(low, high + 1, size=cfg.num_prompts).tolist())
    ins, outs = lengths
    return [max(1, n - hf.num_special_tokens) for n in ins], outs


def _sharegpt_questions(path: str) -> list[str]:
    """First turns of the conversations with two turns or more (`conversations` or `conversation`)."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    if not isinstance(data, list) or not all(isinstance(row, dict) for row in data):
        raise ValueError(f"{path} is not a ShareGPT file (a JSON list of conversation objects)")
    turns = [row.get("conversations", row.get("conversation", [])) for row in data]
    firsts = [conv[0] for conv in turns if isinstance(conv, list) and len(conv) >= 2]
    if not all(isinstance(turn, dict) and isinstance(turn.get("value"), str) for turn in firsts):
        raise ValueError(f"{path}: a conversation's first turn has no string 'value'")
    return [turn["value"] for turn in firsts]


#: The builder of each `upstream_prompts` value.
BUILDERS = {"vllm": vllm_random, "sglang-random-ids": sglang_random_ids, "sglang-random": sglang_random}
