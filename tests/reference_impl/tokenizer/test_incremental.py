"""Incremental decoders: never half a character, and joined they equal a one-shot decode."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reference_impl.tokenizer import ByteLevelTokenizer, get_tokenizer

from .hf_builders import CORPUS, KINDS, train_tokenizer

TEXT = "héllo wörld, 日本語 and emoji 🎉🙂 → done"
ALPHABET = sorted(set("".join(CORPUS)))


@pytest.fixture(scope="module")
def hf_tokenizers(tmp_path_factory):
    return {kind: get_tokenizer(train_tokenizer(kind, tmp_path_factory.mktemp(kind))) for kind in KINDS}


def decode_in_chunks(tok, ids, sizes):
    """Feed ``ids`` in chunks of the given sizes (cycled), then flush; return every delta."""
    decoder = tok.incremental_decoder()
    deltas, start, i = [], 0, 0
    while start < len(ids):
        size = sizes[i % len(sizes)] if sizes else 1
        deltas.append(decoder.feed(ids[start:start + size]))
        start, i = start + size, i + 1
    deltas.append(decoder.flush())
    return deltas


def test_byte_level_one_token_at_a_time_never_splits_a_character():
    tok = ByteLevelTokenizer()
    deltas = decode_in_chunks(tok, tok.encode(TEXT), [1])
    assert "".join(deltas) == TEXT
    assert all("\ufffd" not in d for d in deltas)
    assert deltas.count("") >= len(tok.encode(TEXT)) - len(TEXT)


def test_byte_level_holds_a_character_until_its_last_byte():
    decoder = ByteLevelTokenizer().incremental_decoder()
    first, second, third = "日".encode()
    assert decoder.feed([first]) == ""
    assert decoder.feed([second, ByteLevelTokenizer().eos_token_id]) == ""
    assert decoder.feed([third, ord("!")]) == "日!"
    assert decoder.flush() == ""


def test_byte_level_flush_of_a_broken_tail_is_replacement_character():
    decoder = ByteLevelTokenizer().incremental_decoder()
    assert decoder.feed(list("a日".encode())[:-1]) == "a"
    assert decoder.flush() == "\ufffd"


@given(ids=st.lists(st.integers(0, 259), max_size=64), sizes=st.lists(st.integers(1, 5), max_size=8))
def test_byte_level_any_ids_any_chunks_match_one_shot_decode(ids, sizes):
    tok = ByteLevelTokenizer()
    assert "".join(decode_in_chunks(tok, ids, sizes)) == tok.decode(ids)


@pytest.mark.parametrize("kind", KINDS)
def test_hf_one_token_at_a_time_matches_one_shot_decode(hf_tokenizers, kind):
    tok = hf_tokenizers[kind]
    for text in CORPUS:
        ids = tok.encode(text)
        deltas = decode_in_chunks(tok, ids, [1])
        assert "".join(deltas) == tok.decode(ids)
        assert all("\ufffd" not in d for d in deltas)


def test_hf_byte_bpe_splits_multi_byte_characters_and_still_matches(hf_tokenizers):
    tok = hf_tokenizers["byte_bpe"]
    ids = tok.encode("🎉 ∑")
    assert any("\ufffd" in tok.decode([i]) for i in ids)
    assert "".join(decode_in_chunks(tok, ids, [1])) == "🎉 ∑"


@settings(max_examples=50, deadline=None)
@given(kind=st.sampled_from(KINDS), text=st.text(alphabet=ALPHABET, max_size=40),
       sizes=st.lists(st.integers(1, 4), max_size=6))
def test_hf_any_text_any_chunks_match_one_shot_decode(hf_tokenizers, kind, text, sizes):
    tok = hf_tokenizers[kind]
    ids = tok.encode(text)
    assert "".join(decode_in_chunks(tok, ids, sizes)) == tok.decode(ids)


@settings(max_examples=50, deadline=None)
@given(kind=st.sampled_from(KINDS), data=st.data(), sizes=st.lists(st.integers(1, 4), max_size=6))
def test_hf_any_ids_any_chunks_match_one_shot_decode(hf_tokenizers, kind, data, sizes):
    tok = hf_tokenizers[kind]
    ids = data.draw(st.lists(st.integers(0, tok.vocab_size - 1), max_size=40))
    assert "".join(decode_in_chunks(tok, ids, sizes)) == tok.decode(ids)


def max_window_len(tok, ids):
    decoder = tok.incremental_decoder()
    max_window = 0
    for token_id in ids:
        decoder.feed([token_id])
        max_window = max(max_window, decoder.window_len)
    return max_window


@pytest.mark.parametrize("kind", KINDS)
def test_hf_window_does_not_grow_with_output_length(hf_tokenizers, kind):
    tok = hf_tokenizers[kind]
    ids = tok.encode(" ".join(CORPUS))
    short, long = max_window_len(tok, ids * 2), max_window_len(tok, ids * 50)
    assert long == short
    assert short < len(ids) // 2
