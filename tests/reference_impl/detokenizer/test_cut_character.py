"""A character cut by the end of the output is dropped, never sent as U+FFFD (issue 23 item 9)."""

from __future__ import annotations

import httpx

from reference_impl.detokenizer.stream import DetokenizeStream
from reference_impl.messages import FinishReason
from reference_impl.tokenizer.byte_level import ByteLevelTokenizer
from tests.reference_impl.conftest import MODEL, stream_chunks


def test_a_cut_character_at_the_finish_is_dropped():
    tok = ByteLevelTokenizer()
    ids = tok.encode("ab日")
    stream = DetokenizeStream(tok.incremental_decoder())
    assert stream.step(ids[:3], None) == "ab"
    assert stream.step(ids[3:4], FinishReason("length")) == ""


def test_streamed_and_full_texts_are_equal_and_never_end_in_a_replacement(server):
    for max_tokens in range(1, 41):
        body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "seed": 1,
                "max_tokens": max_tokens, "ignore_eos": True}
        full = httpx.post(server.url + "/v1/chat/completions", json=body, timeout=60).json()
        text = full["choices"][0]["message"]["content"]
        chunks, _ = stream_chunks(server.url, "/v1/chat/completions", body)
        streamed = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
        assert not text.endswith("\ufffd") and streamed == text, max_tokens
