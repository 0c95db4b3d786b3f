"""The stop-string automaton: same answers as brute force, linear memory for long stop strings."""

from __future__ import annotations

import tracemalloc

from hypothesis import given
from hypothesis import strategies as st

from reference_impl.detokenizer.stream import DetokenizeStream
from reference_impl.messages import FinishReason
from reference_impl.scheduler.request import StopChecker
from reference_impl.tokenizer import ByteLevelTokenizer
from reference_impl.tokenizer.stop_strings import StopScanner

ALPHABET = "abc日"


def brute_held_len(text: str, stops: list[str]) -> int:
    prefixes = {s[:k] for s in stops for k in range(1, len(s) + 1)}
    return max((k for k in range(1, len(text) + 1) if text[-k:] in prefixes), default=0)


def brute_first_match(text: str, stops: list[str]) -> str | None:
    for end in range(1, len(text) + 1):
        ending = [s for s in stops if text[:end].endswith(s)]
        if ending:
            return max(ending, key=len)
    return None


@given(stops=st.lists(st.text(ALPHABET, min_size=1, max_size=5), min_size=1, max_size=4),
       pieces=st.lists(st.text(ALPHABET, max_size=6), max_size=8))
def test_scanner_agrees_with_brute_force(stops, pieces):
    scanner = StopScanner(stops)
    text = ""
    for piece in pieces:
        scanner.feed(piece)
        text += piece
        assert scanner.held_len == brute_held_len(text, stops)
        assert scanner.matched == brute_first_match(text, stops)


def peak_bytes(fn) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_60kb_stop_string_costs_linear_memory_in_the_detokenizer():
    tok = ByteLevelTokenizer()
    stop = "ab" * 30_000  # 60 KB; every prefix kept would be 1.8 GB

    def run() -> None:
        stream = DetokenizeStream(tok.incremental_decoder(), [stop])
        for _ in range(200):
            stream.step(tok.encode("ab" * 50), None)
        stream.step([], FinishReason("length"))

    assert peak_bytes(run) < 64 * 2**20


def test_scheduler_stop_check_finds_a_stop_string_split_across_tokens():
    tok = ByteLevelTokenizer()
    checker = StopChecker(tok)

    class FakeReq:  # the slots StopChecker reads
        sampling = type("S", (), {"max_new_tokens": 10**6, "ignore_eos": True,
                                  "stop_token_ids": (), "stop": ("日本", "zz")})()
        output_ids: list[int] = []
        stop_window = checker.tail_window(("日本", "zz"))
        stop_scanner = None
        stop_token_ids: frozenset[int] = frozenset()
        stop_decoder = None

    req = FakeReq()
    reasons = []
    for token in tok.encode("xx 日本 yy"):
        req.output_ids.append(token)
        reasons.append(checker.check(req, token))
    assert [r for r in reasons if r is not None][0] == FinishReason("stop", "日本")
    assert reasons.index(FinishReason("stop", "日本")) == len("xx 日本".encode()) - 1
