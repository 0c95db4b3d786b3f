"""Prompt lengths: fitted exactly through the target's /tokenize, or estimated (and said so)."""

from __future__ import annotations

import json

import pytest

from loadgen.plan.config import RunConfig
from loadgen.plan.datasets import DatasetConfig
from loadgen.plan.lengths import (
    SOURCE_ESTIMATE,
    SOURCE_SERVER,
    FileTokenizer,
    fit_to_len,
    tokenizer_file,
)
from loadgen.run.runner import run
from tests.loadgen.test_compat import _tiny_tokenizer_dir


class _MergingTokenizer:
    """Characters are tokens, except that "ab" is one token: cutting between a and b re-merges."""

    def encode(self, text: str) -> list[int]:
        ids, i = [], 0
        while i < len(text):
            if text.startswith("ab", i):
                ids.append(1000)
                i += 2
            else:
                ids.append(ord(text[i]))
                i += 1
        return ids

    def decode(self, ids: list[int]) -> str:
        return "".join("ab" if t == 1000 else chr(t) for t in ids)


def test_fit_to_len_settles_when_the_cut_retokenises_differently():
    tok = _MergingTokenizer()
    ids = [ord("x"), ord("a")] + tok.encode("bab" * 10)  # "xa" + "bab...": the cut can re-merge
    for n in range(1, 12):
        text, count = fit_to_len(ids, n, tok, lambda: " c")
        assert count == n == len(tok.encode(text)), (n, text)


def _cfg(url: str) -> RunConfig:
    return RunConfig(base_url=url, backend="openai-completions", concurrency=4, num_prompts=12,
                     include_usage=True)


LENGTHS = DatasetConfig(random_input_len=128, random_output_len=4, random_range_ratio=0.5)


def test_random_prompts_are_fitted_through_the_server_tokenize(start_server):
    server = start_server("--ttft-ms", "1", "--gap-ms", "1")
    result = run(_cfg(server.base_url), LENGTHS)
    assert result.dataset_info["input_lengths"] == SOURCE_SERVER
    recs = result.records
    # the scripted server's usage counts the prompt's bytes, as its /tokenize does
    assert all(r.is_exact_input_len and r.input_len == r.usage_prompt_tokens for r in recs)
    assert all(64 <= r.input_len <= 128 for r in recs)
    s = result.summary
    assert s["total_input_tokens"] == s["total_input_tokens_dataset"]


def test_without_tokenize_the_lengths_are_an_estimate_and_said_so(start_server, capsys):
    server = start_server("--ttft-ms", "1", "--gap-ms", "1", "--no-tokenize")
    result = run(_cfg(server.base_url), LENGTHS)
    assert result.dataset_info["input_lengths"] == SOURCE_ESTIMATE
    assert "/tokenize unusable (HTTP 404" in capsys.readouterr().err
    s = result.summary
    assert s["completed"] == 12
    # one word per token is the estimate; the byte-level server counts several per word
    assert s["total_input_tokens"] > 2 * s["total_input_tokens_dataset"]


def test_file_tokenizer_reads_a_file_or_a_directory_and_its_chat_template(tmp_path):
    folder = _tiny_tokenizer_dir(tmp_path)
    path = str(folder / "tokenizer.json")
    assert tokenizer_file(path) == path and tokenizer_file(str(folder)) == path
    bare = FileTokenizer(path)  # the file alone: its folder's config is still read
    assert bare.chat_len("hello") == len(bare.encode("hello")) + 3
    ids = bare.encode("hello world")
    assert bare.decode([0, *ids]) == "hello world" and bare.decode([0, *ids], skip_special_tokens=False) == "<s>hello world"
    assert bare.num_special_tokens == 1
    (folder / "tokenizer_config.json").unlink()
    assert FileTokenizer(str(folder)).chat_len("hello") is None and FileTokenizer(path).config == {}
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "vocab.txt").write_text("x")
    with pytest.raises(FileNotFoundError, match=r"other has no tokenizer.json .*found: vocab.txt\)$"):
        tokenizer_file(str(tmp_path / "other"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match=r"found: nothing\)$"):
        FileTokenizer(str(tmp_path / "empty"))


def test_chat_template_gets_bos_and_eos_text_from_strings_or_dicts(tmp_path):
    folder = _tiny_tokenizer_dir(tmp_path)
    config = {"bos_token": {"content": "<s>"}, "eos_token": "</s>",
              "chat_template": "{{ bos_token }}{% for m in messages %}{{ m['content'] }}{% endfor %}{{ eos_token }}"}
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    tok = FileTokenizer(str(folder))
    assert tok.chat_len("hello") == len(tok.encode("hello")) + 2
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, "bos_token": None}))
    assert FileTokenizer(str(folder)).chat_len("hello") == len(tok.encode("hello")) + 1
