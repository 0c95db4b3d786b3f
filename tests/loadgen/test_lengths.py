"""Prompt lengths: fitted exactly through the target's /tokenize, or estimated (and said so)."""

from __future__ import annotations

import http.server
import json
import threading

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


class _Scripted(http.server.BaseHTTPRequestHandler):
    """/tokenize and /detokenize as `self.server.script` says: a scripted target on 127.0.0.1."""

    def do_POST(self):  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        self.server.seen.append((self.path, body, self.headers.get("authorization")))
        status, answer = self.server.script(self.path, body)
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def scripted():
    """Start a scripted target: `scripted(fn)` -> its base URL; fn(path, body) -> (status, json)."""
    servers = []

    def start(script):
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Scripted)
        server.script, server.seen = script, []
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_port}", server.seen

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def _vllm(vocab: int, context=4096, strict_fields: int = 0):
    def script(path, body):
        if path == "/tokenize":
            if strict_fields and "add_special_tokens" in body:
                return strict_fields, {"error": "extra field"}
            return 200, {"count": 2, "max_model_len": context, "tokens": [5, 6]}
        ok = all(0 <= t < vocab for t in body["tokens"])
        return (200, {"prompt": "hi"}) if ok else (400, {"error": "id out of range"})
    return script


def test_probe_server_finds_tokenize_and_the_context(scripted):
    from loadgen.plan.lengths import probe_server

    url, seen = scripted(_vllm(300))
    tok, why = probe_server(url, {"authorization": "Bearer k"}, 30.0)
    assert (why, tok.max_model_len, tok.extra, tok.encode("x")) == ("", 4096, {"add_special_tokens": False}, [5, 6])
    assert seen[0] == ("/tokenize", {"prompt": "hello world", "add_special_tokens": False}, "Bearer k")
    assert seen[1] == ("/detokenize", {"tokens": [5, 6]}, "Bearer k") and tok.decode([5]) == "hi"
    tok.close()
    for status in (400, 422):
        url, seen = scripted(_vllm(300, strict_fields=status))
        tok, why = probe_server(url, {}, 30.0)  # a server that refuses vLLM's extra field: asked again without
        assert why == "" and tok.extra == {} and seen[1][1] == {"prompt": "hello world"}
        tok.close()
    tok, _ = probe_server(scripted(_vllm(300, 1))[0], {}, 30.0)
    assert tok.max_model_len == 1
    tok.close()
    for context in (True, 0, "4096"):
        tok, _ = probe_server(scripted(_vllm(300, context))[0], {}, 30.0)
        assert tok.max_model_len is None, context
        tok.close()


@pytest.mark.parametrize(("script", "why"), [
    (lambda path, body: (500, {}), "HTTP 500 from /tokenize"),
    (lambda path, body: (404, {}) if path == "/tokenize" else (200, {}), "HTTP 404 from /tokenize"),
    (lambda path, body: (200, {"tokens": "5 6"}), "ValueError: unexpected response shape"),
    (lambda path, body: (200, {"tokens": [5]} if path == "/tokenize" else {"prompt": 5}),
     "ValueError: unexpected response shape"),
    (lambda path, body: (200, {"count": 2}), "KeyError: 'tokens'"),
    (lambda path, body: (200, {"tokens": [5]}) if path == "/tokenize" else (500, {}), "HTTP 500 from /detokenize"),
])
def test_probe_server_says_why_in_one_line(scripted, script, why):
    from loadgen.plan.lengths import probe_server

    assert probe_server(scripted(script)[0], {}, 30.0) == (None, why)


def test_probe_vocab_size_bisects_to_the_first_refused_id(scripted):
    from loadgen.plan.lengths import MAX_PROBED_VOCAB, probe_vocab_size

    for vocab in (1, 2, 3, 5, 300, 777, 32_000):
        url, seen = scripted(_vllm(vocab))
        assert probe_vocab_size(url, {"authorization": "Bearer k"}, 30.0) == (vocab, "")
        assert seen[-1][2] == "Bearer k" and len(seen) <= 2 * vocab.bit_length() + 2
    assert probe_vocab_size(scripted(_vllm(0))[0], {}, 30.0) == (None, "/detokenize refused token id 0")
    every = probe_vocab_size(scripted(lambda path, body: (200, {"prompt": ""}))[0], {}, 30.0)
    assert every == (None, f"/detokenize accepted every id up to {MAX_PROBED_VOCAB:,}: it does not check the range")
    assert probe_vocab_size(scripted(lambda path, body: (500, {}))[0], {}, 30.0) == (
        None, "HTTP 500 from /detokenize")
    assert probe_vocab_size(scripted(lambda path, body: (200, {"prompt": 1}))[0], {}, 30.0) == (
        None, "ValueError: unexpected response shape")
    assert probe_vocab_size(scripted(lambda path, body: (422, {}))[0], {}, 30.0) == (
        None, "/detokenize refused token id 0")


def test_file_vocab_size_is_the_base_vocabulary_without_added_tokens(tmp_path):
    from tokenizers import Tokenizer

    from loadgen.plan.lengths import file_vocab_size

    folder = _tiny_tokenizer_dir(tmp_path)
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    base = tok.get_vocab_size(with_added_tokens=False)
    tok.add_special_tokens(["<|added|>"])
    tok.save(str(folder / "tokenizer.json"))
    assert file_vocab_size(str(folder)) == base == 305


def test_chat_template_options_roles_and_missing_names(tmp_path):
    folder = _tiny_tokenizer_dir(tmp_path)
    template = ("{{ bos_token }}{{ system.message }}{% for m in messages %}\n    {% if m['role'] == 'user' %}<|user|>{% endif %}\n"
                "{{ m['content'] }}{% endfor %}")
    (folder / "tokenizer_config.json").write_text(json.dumps({"bos_token": {"lstrip": True}, "chat_template": template}))
    tok = FileTokenizer(str(folder))
    # blocks trimmed (no newline or indent left by a tag line), an undefined name renders empty, the
    # message's role is "user", a bos_token dict without content is no text
    assert tok.chat_len("hello") == len(tok.encode("<|user|>hello"))


def test_tokenizer_file_names_the_first_8_files_of_a_folder_without_it(tmp_path):
    for name in "abcdefghi":
        (tmp_path / f"{name}.txt").write_text("x")
    with pytest.raises(FileNotFoundError, match=r"found: a.txt, b.txt, c.txt, d.txt, e.txt, f.txt, g.txt, h.txt\)$"):
        tokenizer_file(str(tmp_path))


class _NeverSettles:
    """Each text re-tokenises to one more token than its ids: fit_to_len can only give up."""

    def encode(self, text: str) -> list[int]:
        return [ord(c) for c in text] + [0]

    def decode(self, ids: list[int]) -> str:
        return "".join(chr(t) for t in ids if t)


def test_fit_to_len_that_cannot_settle_returns_the_real_count():
    text, count = fit_to_len([ord(c) for c in "abcdef"], 4, _NeverSettles(), lambda: "z")
    assert count == len(_NeverSettles().encode(text)) and count != 4
