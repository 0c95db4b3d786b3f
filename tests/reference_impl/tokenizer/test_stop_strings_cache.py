"""The stop-string automaton cache is bounded by bytes (issue 23 item 5)."""

from __future__ import annotations

import random
import tracemalloc

from reference_impl.tokenizer.stop_strings import StopScanner, stop_automaton


def _max_size_stops(rng: random.Random) -> tuple[str, ...]:
    """16 stop strings of 1024 characters: the largest set the default limits accept."""
    return tuple("".join(rng.choice("abcdefghij") for _ in range(1024)) for _ in range(16))


def test_cached_automata_stay_under_the_byte_bound():
    rng = random.Random(0)
    tracemalloc.start()
    try:
        for _ in range(20):  # about 84 MiB if all were kept (the count-bounded cache kept 256)
            StopScanner(_max_size_stops(rng))
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert held < 48 * 2**20, f"{held / 2**20:.0f} MiB held"


def test_a_shared_stop_set_hits_the_cache_and_scans_still_match():
    stops = ("</s>", "STOP")
    assert stop_automaton(stops) is stop_automaton(stops)
    scanner = StopScanner(stops)
    assert scanner.feed("abc ST") is None and scanner.held_len == 2
    assert scanner.feed("OP!") == "STOP"
