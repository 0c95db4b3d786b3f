"""The embedded byte-level tokenizer: ids, round trips, special tokens, chat format."""

from __future__ import annotations

from array import array

from hypothesis import given
from hypothesis import strategies as st

from reference_impl.tokenizer import ByteLevelTokenizer, get_tokenizer

MULTI_BYTE_TEXT = "héllo wörld, 日本語 and emoji 🎉🙂 → done"


def test_get_tokenizer_none_is_byte_level():
    tok = get_tokenizer(None)
    assert isinstance(tok, ByteLevelTokenizer)
    assert tok.vocab_size == 260
    assert (tok.bos_token_id, tok.eos_token_id) == (256, 257)


def test_multi_byte_characters_span_several_tokens():
    tok = ByteLevelTokenizer()
    assert tok.encode("a") == [97]
    assert tok.encode("é") == [0xC3, 0xA9]
    assert len(tok.encode("日")) == 3
    assert len(tok.encode("🎉")) == 4


def test_round_trip_multi_byte_text():
    tok = ByteLevelTokenizer()
    ids = tok.encode(MULTI_BYTE_TEXT)
    assert all(0 <= i < 256 for i in ids)
    assert tok.decode(ids) == MULTI_BYTE_TEXT


@given(st.text())
def test_round_trip_any_text(text):
    tok = ByteLevelTokenizer()
    assert tok.decode(tok.encode(text)) == text


def test_special_tokens_never_produce_text():
    tok = ByteLevelTokenizer()
    ids = [tok.bos_token_id, *tok.encode("hi"), tok.eos_token_id, 258, 259]
    assert tok.decode(ids) == "hi"


def test_special_token_text_is_encoded_as_plain_bytes():
    tok = ByteLevelTokenizer()
    assert tok.encode("<|eos|>") == list(b"<|eos|>")


def test_bad_bytes_become_replacement_character():
    tok = ByteLevelTokenizer()
    assert tok.decode([0xFF, 97]) == "\ufffda"
    assert tok.decode(tok.encode("日")[:2]) == "\ufffd"


def test_decode_accepts_int64_arrays():
    tok = ByteLevelTokenizer()
    ids = array("q", tok.encode(MULTI_BYTE_TEXT))
    assert tok.decode(ids) == MULTI_BYTE_TEXT


def test_lone_surrogate_is_encoded_as_question_mark():
    tok = ByteLevelTokenizer()
    assert tok.decode(tok.encode("a\ud800b")) == "a?b"


def test_chat_template_is_plain_text():
    tok = ByteLevelTokenizer()
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "日本?"}]
    prompt = tok.apply_chat_template(messages)
    assert prompt == "<|system|>\nBe brief.\n<|user|>\n日本?\n<|assistant|>\n"
    assert tok.decode(tok.encode(prompt)) == prompt


def test_chat_template_accepts_text_parts_and_null_content():
    tok = ByteLevelTokenizer()
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {"role": "assistant", "content": None},
    ]
    assert tok.apply_chat_template(messages) == "<|user|>\na\nb\n<|assistant|>\n\n<|assistant|>\n"
