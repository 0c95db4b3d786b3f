"""H6: every delta tracker streams exactly the generated text, in every output mode."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reference_impl.hot_paths import HOT_PATHS
from reference_impl.server.deltas import (
    ConcatDeltaTracker,
    DeltaTracker,
    IncrementalConcatDeltaTracker,
    IncrementalOffsetDeltaTracker,
    OffsetDeltaTracker,
)

# Pieces a detokenizer may emit: ASCII, multi-byte characters, emoji with joiners, newlines.
pieces = st.lists(st.text(alphabet=st.sampled_from(list("ab \n\"é漢🦀\u200d")), max_size=6),
                  max_size=12)
choices = st.lists(pieces, min_size=1, max_size=4)


def cumulative(parts: list[str]) -> list[str]:
    """The cumulative texts a non-incremental stream delivers for these pieces."""
    texts, text = [], ""
    for part in parts:
        text += part
        texts.append(text)
    return texts


def interleave(per_choice: list[list[str]]) -> list[tuple[int, str]]:
    """Outputs of all choices, round-robin, as ``(index, text)``."""
    longest = max(len(outputs) for outputs in per_choice)
    return [(i, outputs[step]) for step in range(longest)
            for i, outputs in enumerate(per_choice) if step < len(outputs)]


def stream(tracker: DeltaTracker, outputs: list[tuple[int, str]]) -> dict[int, str]:
    joined: dict[int, str] = {}
    for index, text in outputs:
        joined[index] = joined.get(index, "") + tracker.delta(index, text)
    return joined


@pytest.mark.parametrize("form", HOT_PATHS["H6"].choices)
@given(per_choice=choices)
def test_joined_deltas_equal_final_text(form, per_choice):
    tracker = HOT_PATHS["H6"].create(form, incremental=False)
    outputs = interleave([cumulative(parts) for parts in per_choice])
    joined = stream(tracker, outputs)
    assert joined == {i: "".join(parts) for i, parts in enumerate(per_choice) if parts}


@pytest.mark.parametrize("form", HOT_PATHS["H6"].choices)
@given(per_choice=choices)
def test_incremental_text_is_the_delta(form, per_choice):
    tracker = HOT_PATHS["H6"].create(form, incremental=True)
    outputs = interleave(per_choice)
    deltas = [tracker.delta(index, text) for index, text in outputs]
    assert deltas == [text for _, text in outputs]
    assert stream(HOT_PATHS["H6"].create(form, incremental=True), outputs) == {
        i: "".join(parts) for i, parts in enumerate(per_choice) if parts}


@pytest.mark.parametrize("incremental", [False, True])
@pytest.mark.parametrize("form", HOT_PATHS["H6"].choices)
def test_first_chunk_detected_even_when_empty(form, incremental):
    tracker = HOT_PATHS["H6"].create(form, incremental=incremental)
    assert tracker.is_first(0) and tracker.is_first(1)
    assert tracker.delta(0, "") == ""
    assert not tracker.is_first(0)
    assert tracker.is_first(1)
    tracker.delta(1, "x")
    assert not tracker.is_first(1)


@pytest.mark.parametrize("form", HOT_PATHS["H6"].choices)
def test_shorter_final_text_gives_empty_delta(form):
    tracker = HOT_PATHS["H6"].create(form, incremental=False)
    assert tracker.delta(0, "Hello") == "Hello"
    assert tracker.delta(0, "Hello EN") == " EN"
    assert tracker.delta(0, "Hello") == ""


def tails(parts: list[str], wakeups: list[bool]) -> list[tuple[str, int]]:
    """``(text, start)`` outputs as H3's tail form hands them over: what came since the last one."""
    outputs, start, pending = [], 0, ""
    for part, wake in zip(parts, wakeups, strict=False):
        pending += part
        if wake:
            outputs.append((pending, start))
            start, pending = start + len(pending), ""
    return outputs


@pytest.mark.parametrize("form", HOT_PATHS["H6"].choices)
@given(parts=pieces, wakeups=st.lists(st.booleans(), min_size=12, max_size=12))
def test_tail_outputs_stream_the_same_deltas_as_cumulative_ones(form, parts, wakeups):
    outputs = tails(parts, wakeups)
    tracker = HOT_PATHS["H6"].create(form, incremental=False)
    deltas = [tracker.delta(0, text, start) for text, start in outputs]
    assert deltas == [text for text, _ in outputs]
    whole = "".join(parts)
    final = tracker.delta(0, whole)  # the final output holds the whole text
    assert "".join(deltas) + final == whole


@pytest.mark.parametrize("form", HOT_PATHS["H6"].choices)
def test_tail_past_the_streamed_text_is_refused(form):
    tracker = HOT_PATHS["H6"].create(form, incremental=False)
    tracker.delta(0, "abc")
    with pytest.raises(ValueError, match="starts at character 5"):
        tracker.delta(0, "xyz", start=5)


@given(parts=pieces, prompt=st.text(min_size=1, max_size=5))
def test_echo_stays_outside_the_tracker(parts, prompt):
    """The serving layer prepends the echo; later deltas lose nothing (upstream review bug)."""
    tracker = OffsetDeltaTracker()
    streamed = ""
    for text in cumulative(parts):
        first = tracker.is_first(0)
        streamed += (prompt if first else "") + tracker.delta(0, text)
    assert streamed == prompt + "".join(parts) if parts else streamed == ""


def test_registry():
    h6 = HOT_PATHS["H6"]
    assert h6.implementation("concat") is ConcatDeltaTracker
    assert h6.implementation("offset") is OffsetDeltaTracker
    assert h6.implementation("concat", incremental=True) is IncrementalConcatDeltaTracker
    assert h6.implementation("offset", incremental=True) is IncrementalOffsetDeltaTracker
    assert {h6.implementation(f, incremental=True).form for f in h6.choices} == set(h6.choices)
    assert all(issubclass(h6.implementation(f, incremental=m), DeltaTracker)
               for f in h6.choices for m in (False, True))
    with pytest.raises(ValueError, match="rope"):
        h6.implementation("rope")
