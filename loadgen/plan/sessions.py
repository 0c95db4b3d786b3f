"""Multi-turn sessions: the user turns of each conversation, synthetic or from a ShareGPT file.

Only the user side is planned: each later turn's prompt is the whole conversation so far, with
the server's actual answers, which the worker puts together during the run (loadgen/run/worker.py).
Synthetic sessions have `multi_turn_num_turns` turns (default 3) of `multi_turn_user_len` tokens
each, output lengths drawn as `--random-output-len`; a ShareGPT file gives each conversation's human
turns in order (at most `multi_turn_num_turns` when given), output lengths from the replies (or
`--sharegpt-output-len`).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass

from loadgen.plan.config import DatasetConfig
from loadgen.plan.datasets import _count
from loadgen.plan.texts import sample_lengths, texts_of_len

DEFAULT_TURNS = 3
_USER_ROLES = ("human", "user")


@dataclass(frozen=True)
class Session:
    """One conversation's user turns, their lengths and the output length asked per turn."""

    user_turns: tuple[str, ...]
    user_lens: tuple[int, ...]
    output_lens: tuple[int, ...]
    is_exact_input_len: bool


def build_sessions(cfg: DatasetConfig, tokenizer=None) -> list[Session]:
    """`num_prompts` sessions (fewer when a ShareGPT file has fewer usable conversations)."""
    rng = random.Random(cfg.seed)
    if cfg.dataset_path is not None:
        return _sharegpt_sessions(cfg, rng, tokenizer)
    turns = cfg.multi_turn_num_turns or DEFAULT_TURNS
    texts = texts_of_len(rng, [cfg.multi_turn_user_len] * (cfg.num_prompts * turns), tokenizer)
    outs = sample_lengths(rng, cfg.random_output_len, cfg.random_range_ratio, cfg.num_prompts * turns,
                          cfg.convention)
    sessions = []
    for s in range(cfg.num_prompts):
        part = texts[s * turns:(s + 1) * turns]
        sessions.append(Session(tuple(t for t, _, _ in part), tuple(n for _, n, _ in part),
                                tuple(outs[s * turns:(s + 1) * turns]), all(ok for _, _, ok in part)))
    return sessions


def _sharegpt_sessions(cfg: DatasetConfig, rng: random.Random, tokenizer) -> list[Session]:
    with open(cfg.dataset_path, encoding="utf-8") as f:
        data = json.load(f)
    if not isinstance(data, list):
        raise ValueError(f"{cfg.dataset_path} is not a ShareGPT JSON list of conversations")
    if not cfg.disable_shuffle:
        rng.shuffle(data)
    sessions = []
    for conv in data:
        session = _one_session(conv.get("conversations", []) if isinstance(conv, dict) else [], cfg, tokenizer)
        if session is not None:
            sessions.append(session)
        if len(sessions) == cfg.num_prompts:
            break
    if not sessions:
        raise ValueError(f"no conversations with a human turn in {cfg.dataset_path}")
    return sessions


def _one_session(messages: list, cfg: DatasetConfig, tokenizer) -> Session | None:
    """The human turns in order, each with the length of the reply after it as its output length."""
    users, outs = [], []
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict) or msg.get("from") not in _USER_ROLES or not msg.get("value"):
            continue
        after = messages[i + 1] if i + 1 < len(messages) else None
        reply = after.get("value") if isinstance(after, dict) and after.get("from") not in _USER_ROLES else None
        users.append(msg["value"])
        if cfg.sharegpt_output_len is not None:
            outs.append(cfg.sharegpt_output_len)
        else:
            outs.append(max(_count(reply, tokenizer), 1) if isinstance(reply, str) and reply else cfg.random_output_len)
        if cfg.multi_turn_num_turns is not None and len(users) == cfg.multi_turn_num_turns:
            break
    if not users:
        return None
    return Session(tuple(users), tuple(_count(u, tokenizer) for u in users), tuple(outs), tokenizer is not None)
