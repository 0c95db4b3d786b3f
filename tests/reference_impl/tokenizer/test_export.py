"""The embedded tokenizer as a Hugging Face directory gives the server's own ids, offline."""

from __future__ import annotations

import json
import os

import httpx
import pytest
from transformers import AutoTokenizer

from reference_impl.tokenizer import ByteLevelTokenizer, render_plain_chat
from reference_impl.tokenizer.export import EMBEDDED_DIR, write
from tests.reference_impl.conftest import MODEL, ServerProcess

TEXTS = ["hello world", "  two leading spaces", "", " ", "\n\t\r\n", "日本語のテキスト",
         "emoji 🙂🚀 and joiners 👩\u200d💻", "café naïve", "<|bos|> spelled out <|eos|>", "x" * 5000]
MESSAGES = [[{"role": "user", "content": "hi"}],
            [{"role": "system", "content": "be brief"}, {"role": "user", "content": "日本 🙂"},
             {"role": "assistant", "content": "ok"}, {"role": "user", "content": ""}],
            [{"role": "user", "content": [{"type": "text", "text": "two "}, {"type": "text", "text": "parts"}]}]]


@pytest.fixture(scope="module")
def hf_tokenizer():
    os.environ["HF_HUB_OFFLINE"] = "1"
    return AutoTokenizer.from_pretrained(str(EMBEDDED_DIR))


def test_committed_files_are_what_the_exporter_writes(tmp_path):
    write(tmp_path)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        assert json.loads((tmp_path / name).read_text()) == json.loads((EMBEDDED_DIR / name).read_text()), \
            f"run `python -m reference_impl.tokenizer.export` ({name} drifted)"


@pytest.mark.parametrize("text", TEXTS)
def test_same_ids_and_round_trip(hf_tokenizer, text):
    ids = hf_tokenizer.encode(text, add_special_tokens=False)
    assert ids == ByteLevelTokenizer().encode(text)
    assert hf_tokenizer.decode(ids) == text


def test_special_tokens_match(hf_tokenizer):
    server = ByteLevelTokenizer()
    assert hf_tokenizer.eos_token_id == server.eos_token_id
    assert hf_tokenizer.bos_token_id == server.bos_token_id
    assert len(hf_tokenizer) == server.vocab_size
    assert hf_tokenizer.decode([104, 105, server.eos_token_id], skip_special_tokens=True) == "hi"


@pytest.mark.parametrize("messages", MESSAGES)
def test_chat_template_is_the_servers(hf_tokenizer, messages):
    rendered = hf_tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert rendered == render_plain_chat(messages)


def test_server_tokenize_gives_the_same_ids(hf_tokenizer):
    """The real server's /tokenize, for text and for messages, and one started on this directory."""
    with ServerProcess("--sim-profile", "zero") as default, \
            ServerProcess("--sim-profile", "zero", "--tokenizer-path", str(EMBEDDED_DIR)) as on_dir:
        for srv in (default, on_dir):
            for text in TEXTS[:-1]:
                if not text:
                    continue
                got = httpx.post(srv.url + "/tokenize", json={"model": srv_model(srv), "prompt": text},
                                 timeout=30).json()["tokens"]
                assert got == hf_tokenizer.encode(text, add_special_tokens=False), text
            for messages in MESSAGES:
                got = httpx.post(srv.url + "/tokenize", json={"model": srv_model(srv), "messages": messages},
                                 timeout=30).json()["tokens"]
                assert got == hf_tokenizer.apply_chat_template(messages, add_generation_prompt=True,
                                                               tokenize=True, return_dict=False), messages


def srv_model(srv) -> str:
    return httpx.get(srv.url + "/v1/models", timeout=30).json()["data"][0]["id"] or MODEL
