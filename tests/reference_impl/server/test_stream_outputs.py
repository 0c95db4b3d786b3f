"""H3: the request's text state and what each output form hands its consumer."""

from __future__ import annotations

import asyncio

import pytest

from reference_impl.hot_paths import HOT_PATHS
from reference_impl.messages import FinishReason
from reference_impl.server.stream_outputs import IncrementalOutputs, ReqState


def _state() -> ReqState:
    return ReqState("r", 0, asyncio.Event(), 0.0)


def test_get_text_appends_only_new_chunks():
    """Upstream #22548: the text built so far is kept; old chunks are never joined again."""
    state = _state()
    state.text_chunks += ["ab", "c"]
    assert state.get_text() == "abc"
    state.text_chunks[0] = "XX"  # a re-join of every chunk would pick this up
    state.text_chunks.append("dé")
    assert state.get_text() == "abcdé"
    assert state.get_text() is state.get_text()


def test_take_tail_hands_over_each_chunk_once_with_its_start():
    state = _state()
    state.text_chunks += ["ab", "", "c"]
    assert state.take_tail() == ("abc", 0)
    assert state.take_tail() == ("", 3)
    state.text_chunks += ["東京", "!"]
    assert state.take_tail() == ("東京!", 3)


def _feed(outputs, state: ReqState, text: str, finish=None):
    state.text_chunks.append(text)
    state.output_ids.append(len(state.output_ids))
    return outputs.build(state, text, [0], finish, 4, len(state.output_ids))


@pytest.mark.parametrize("form", HOT_PATHS["H3"].choices)
def test_every_form_ends_with_the_whole_text_and_a_copy_of_the_ids(form):
    outputs, state = HOT_PATHS["H3"].create(form), _state()
    queued = [_feed(outputs, state, t) for t in ("a", "b")]
    out = outputs.take(state, queued)
    assert out.finish_reason is None
    final = outputs.take(state, [_feed(outputs, state, "c", FinishReason("stop"))])
    assert (final.text, final.text_start) == ("abc", 0)
    assert final.output_ids == [0, 1, 2] and final.output_ids is not state.output_ids


def test_intermediate_outputs_per_form():
    texts = {}
    for form in HOT_PATHS["H3"].choices:
        outputs, state = HOT_PATHS["H3"].create(form), _state()
        first = outputs.take(state, [_feed(outputs, state, "ab")])
        second = outputs.take(state, [_feed(outputs, state, "c"), _feed(outputs, state, "d")])
        texts[form] = [(first.text, first.text_start), (second.text, second.text_start)]
        is_live = second.output_ids is state.output_ids
        assert is_live == (form != "copy"), form
    assert texts["copy"] == texts["reference-full"] == [("ab", 0), ("abcd", 0)]
    assert texts["reference"] == [("ab", 0), ("cd", 2)]


def test_incremental_outputs_merge_what_queued_up():
    for form in HOT_PATHS["H3"].choices:
        assert type(HOT_PATHS["H3"].create(form, incremental=True)) is IncrementalOutputs
    outputs, state = HOT_PATHS["H3"].create("reference", incremental=True), _state()
    out = outputs.take(state, [_feed(outputs, state, "a"), _feed(outputs, state, "b")])
    assert (out.text, out.output_ids) == ("ab", [0, 0])
