"""The shipped Hugging Face copy of the byte-level tokenizer counts exactly as the server does.

Third-party clients load ``EMBEDDED_DIR`` with ``tokenizers`` or ``transformers.AutoTokenizer``;
their ids, decoded text and chat prompts must equal the server's own (``ByteLevelTokenizer``
and a real server's ``/tokenize``), or their token counts and synthetic prompt lengths are off.
"""

from __future__ import annotations

import httpx
import pytest
import tokenizers

from reference_impl.tokenizer import EMBEDDED_DIR, ByteLevelTokenizer, get_tokenizer
from reference_impl.tokenizer.export import export, exported_files

from ..conftest import MODEL

TEXTS = {
    "ascii": "The quick brown fox jumps over the lazy dog. 0123456789 !?#$%&*+-/=@[]^_{|}~",
    "all_ascii": "".join(chr(c) for c in range(128)),
    "cjk": "日本語のテキストと東京の数据流式。한국어 텍스트",
    "emoji": "🙂🚀🎉 👩‍👩‍👧‍👦 👍🏽 🇯🇵",
    "latin_combining": "café Zürich naïve e\u0301 Ελλάδα Привет → ∑",
    "whitespace": " \t\n\r\n  \u00a0\u3000\u2028 x  \n\n",
    "empty": "",
    "role_markers": "<|user|>\nhi\n<|assistant|>\n",
}
BROKEN_UTF8 = ([0xE6, 0x97, 0x41], [0xFF], [0xF0, 0x9F], [0xC3], [0x80, 0x80, 0x41], [0xC0, 0xAF])
CHATS = {
    "one_user": [{"role": "user", "content": "Hello!"}],
    "multi_turn": [{"role": "system", "content": "Be brief."},
                   {"role": "user", "content": "日本語で？ 🙂"},
                   {"role": "assistant", "content": "はい。"},
                   {"role": "user", "content": " two\n\nlines \t"}],
    "empty_content": [{"role": "developer", "content": ""}, {"role": "user", "content": "x"}],
    "text_parts": [{"role": "user", "content": [{"type": "text", "text": "first"},
                                                {"type": "text", "text": "second 🚀"}]}],
    "tool": [{"role": "user", "content": "call"}, {"role": "tool", "content": "{\"a\": 1}"}],
}


@pytest.fixture(scope="module")
def server_tok():
    return ByteLevelTokenizer()


@pytest.fixture(scope="module")
def raw_tok():
    return tokenizers.Tokenizer.from_file(str(EMBEDDED_DIR / "tokenizer.json"))


@pytest.fixture(scope="module")
def auto_tok():
    transformers = pytest.importorskip("transformers")
    return transformers.AutoTokenizer.from_pretrained(str(EMBEDDED_DIR), local_files_only=True)


def test_committed_files_are_what_the_generator_writes(tmp_path):
    expected = exported_files()
    assert sorted(p.name for p in EMBEDDED_DIR.iterdir()) == sorted(expected)
    for name, text in expected.items():
        assert (EMBEDDED_DIR / name).read_text(encoding="utf-8") == text, (
            f"{name} is stale: run python -m reference_impl.tokenizer.export")
    written = export(tmp_path / "out")
    assert {p.name: p.read_text(encoding="utf-8") for p in written.iterdir()} == expected


def test_vocab_is_the_byte_level_alphabet_plus_special_tokens(raw_tok, server_tok):
    vocab = raw_tok.get_vocab(with_added_tokens=True)
    assert len(vocab) == server_tok.vocab_size
    byte_chars = {token for token, i in vocab.items() if i < 256}
    assert byte_chars == set(tokenizers.pre_tokenizers.ByteLevel.alphabet())
    assert (vocab["<|bos|>"], vocab["<|eos|>"]) == (server_tok.bos_token_id, server_tok.eos_token_id)


@pytest.mark.parametrize("name", TEXTS)
def test_tokenizers_library_ids_and_round_trip(name, raw_tok, server_tok):
    text = TEXTS[name]
    ids = server_tok.encode(text)
    assert raw_tok.encode(text, add_special_tokens=False).ids == ids
    assert raw_tok.encode(text).ids == ids  # no post-processor: nothing is added
    assert raw_tok.decode(ids) == text


@pytest.mark.parametrize("name", TEXTS)
def test_auto_tokenizer_ids_and_round_trip(name, auto_tok, server_tok):
    text = TEXTS[name]
    ids = server_tok.encode(text)
    assert auto_tok.encode(text, add_special_tokens=False) == ids
    assert auto_tok(text)["input_ids"] == ids  # clients that call the tokenizer get no BOS
    assert auto_tok.decode(ids) == text


def test_auto_tokenizer_special_tokens(auto_tok, server_tok):
    assert auto_tok.eos_token_id == server_tok.eos_token_id
    assert auto_tok.bos_token_id == server_tok.bos_token_id
    assert len(auto_tok) == server_tok.vocab_size


def test_literal_special_token_text(raw_tok, auto_tok, server_tok):
    text = "a<|eos|>b"
    ids = server_tok.encode(text)
    assert auto_tok.encode(text, add_special_tokens=False) == ids  # split_special_tokens
    # NOTE: the bare tokenizers library matches added tokens in text (documented in export.py)
    assert raw_tok.encode(text, add_special_tokens=False).ids == [97, server_tok.eos_token_id, 98]


@pytest.mark.parametrize("ids", BROKEN_UTF8 + ([104, 256, 105, 257, 258, 259],))
def test_decode_of_broken_bytes_and_special_ids(ids, raw_tok, auto_tok, server_tok):
    expected = server_tok.decode(ids)
    assert raw_tok.decode(ids, skip_special_tokens=True) == expected
    assert auto_tok.decode(ids, skip_special_tokens=True) == expected


def _server_ids(url: str, body: dict) -> list[int]:
    response = httpx.post(url + "/tokenize", json={"model": MODEL, **body}, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()["tokens"]


@pytest.mark.parametrize("name", TEXTS)
def test_server_tokenize_prompt_matches(name, server, raw_tok):
    text = TEXTS[name]
    assert _server_ids(server.url, {"prompt": text}) == raw_tok.encode(text).ids


@pytest.mark.parametrize("name", CHATS)
def test_chat_template_matches_server_tokenize(name, server, auto_tok):
    messages = CHATS[name]
    expected = _server_ids(server.url, {"messages": messages})
    prompt = auto_tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert auto_tok.encode(prompt, add_special_tokens=False) == expected
    assert auto_tok.decode(expected) == prompt
    hf_server_tok = get_tokenizer(EMBEDDED_DIR)  # the server started with --tokenizer-path
    assert hf_server_tok.encode(hf_server_tok.apply_chat_template(messages)) == expected


def test_chat_template_without_generation_prompt(auto_tok):
    prompt = auto_tok.apply_chat_template(CHATS["one_user"], tokenize=False,
                                          add_generation_prompt=False)
    assert prompt == "<|user|>\nHello!\n"


def test_a_server_loading_the_directory_encodes_as_the_embedded_one(server_tok):
    """``--tokenizer-path EMBEDDED_DIR`` (the HF loader) gives the byte-level ids, spelled
    special tokens included (``split_special_tokens``)."""
    hf_server_tok = get_tokenizer(EMBEDDED_DIR)
    for text in (*TEXTS.values(), "<|bos|> spelled <|eos|>"):
        assert hf_server_tok.encode(text) == server_tok.encode(text)
