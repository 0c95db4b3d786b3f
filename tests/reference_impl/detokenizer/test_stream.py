"""DetokenizeStream: text deltas per step, stop strings held back and trimmed, stop tokens dropped."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reference_impl.detokenizer.stream import DetokenizeStream
from reference_impl.messages import FinishReason
from reference_impl.tokenizer import ByteLevelTokenizer, get_tokenizer

from ..tokenizer.hf_builders import KINDS, train_tokenizer

BYTES = ByteLevelTokenizer()
LENGTH = FinishReason("length")


def run_steps(tok, steps, finish, stop_strs=()):
    """Feed each step's ids; the last step carries ``finish``. Return every delta."""
    stream = DetokenizeStream(tok.incremental_decoder(), stop_strs)
    deltas = [stream.step(ids, None) for ids in steps[:-1]]
    deltas.append(stream.step(steps[-1], finish))
    return deltas


def byte_steps(*texts):
    return [BYTES.encode(t) for t in texts]


def test_no_stop_strings_streams_everything_at_once():
    assert run_steps(BYTES, byte_steps("ab", "cd", "e"), LENGTH) == ["ab", "cd", "e"]


def test_ascii_stop_string_split_across_steps_is_trimmed_and_never_leaked():
    deltas = run_steps(BYTES, byte_steps("Hello S", "TO", "P and more"), FinishReason("stop", "STOP"),
                       ["STOP"])
    assert deltas == ["Hello ", "", ""]


def test_multi_byte_stop_string_split_inside_a_character():
    data = "abc日本語".encode()
    split = len("abc日".encode()) + 1
    steps = [list(data[:split]), list(data[split:])]
    deltas = run_steps(BYTES, steps, FinishReason("stop", "日本"), ["日本"])
    assert deltas == ["abc", ""]


def test_held_back_prefix_that_is_not_a_stop_string_is_emitted_later():
    stream = DetokenizeStream(BYTES.incremental_decoder(), ["STOP"])
    assert stream.step(BYTES.encode("ab ST"), None) == "ab "
    assert stream.pending_text == "ST"
    assert stream.step(BYTES.encode("Ox"), None) == "STOx"
    assert stream.pending_text == ""
    assert stream.step([BYTES.eos_token_id], FinishReason("stop", BYTES.eos_token_id)) == ""


def test_shorter_suffix_is_held_when_the_longer_one_cannot_match():
    stream = DetokenizeStream(BYTES.incremental_decoder(), ["ab", "c"])
    assert stream.step(BYTES.encode("xac"), None) == "xa"
    assert stream.pending_text == "c"


def test_stop_string_cut_at_its_first_occurrence_in_the_final_step():
    deltas = run_steps(BYTES, byte_steps("one ", "two END three END"), FinishReason("stop", "END"),
                       ["END"])
    assert "".join(deltas) == "one two "


def test_eos_token_produces_no_text():
    steps = [BYTES.encode("hi"), [BYTES.eos_token_id]]
    assert run_steps(BYTES, steps, FinishReason("stop", BYTES.eos_token_id)) == ["hi", ""]


def test_matched_stop_token_id_is_excluded_even_when_it_is_a_byte():
    steps = [BYTES.encode("hi"), BYTES.encode("!X")]
    assert "".join(run_steps(BYTES, steps, FinishReason("stop", ord("X")))) == "hi!"


def test_length_finish_flushes_held_back_prefix():
    deltas = run_steps(BYTES, byte_steps("abc ST", ""), LENGTH, ["STOP"])
    assert deltas == ["abc ", "ST"]


def test_abort_finish_drops_a_broken_tail():
    data = list("a日".encode())
    assert run_steps(BYTES, [data[:-1], []], FinishReason("abort")) == ["a", ""]


def test_step_after_finish_is_an_error():
    stream = DetokenizeStream(BYTES.incremental_decoder())
    stream.step(BYTES.encode("a"), LENGTH)
    with pytest.raises(RuntimeError):
        stream.step(BYTES.encode("b"), None)


def test_pending_tail_stays_within_the_longest_stop_string():
    stream = DetokenizeStream(BYTES.incremental_decoder(), ["aaaa", "ab"])
    emitted = "".join(stream.step(BYTES.encode("a" * k), None) for k in range(1, 200))
    assert len(stream.pending_text) <= 4
    assert emitted + stream.pending_text == "a" * sum(range(1, 200))


def simulate(tok, text, cuts, stop_strs, stop_token):
    """Split ``text``'s ids at ``cuts`` into steps and finish them as the scheduler would.

    Returns (steps, finish): the request finishes at the first step after which the decoded
    output holds a stop string (the earliest one), else with ``stop_token`` (or by length).
    """
    ids = tok.encode(text)
    bounds = sorted({min(c, len(ids)) for c in cuts} | {len(ids)})
    steps, start = [], 0
    for end in bounds:
        steps.append(ids[start:end])
        start = end
        decoded = tok.decode(ids[:end])
        found = [(decoded.find(s), s) for s in stop_strs if s in decoded]
        if found:
            return steps, FinishReason("stop", min(found)[1])
    if stop_token is None:
        return steps, LENGTH
    steps.append([stop_token])
    return steps, FinishReason("stop", stop_token)


def expected_text(tok, steps, finish):
    ids = [i for step in steps for i in step]
    if isinstance(finish.matched, int):
        ids = ids[:-1]
    text = tok.decode(ids)
    if isinstance(finish.matched, str):
        text = text[:text.find(finish.matched)]
    return text


def check_stream(tok, text, cuts, stop_strs, stop_token):
    steps, finish = simulate(tok, text, cuts, stop_strs, stop_token)
    deltas = run_steps(tok, steps, finish, stop_strs)
    expected = expected_text(tok, steps, finish)
    assert "".join(deltas) == expected
    emitted = ""
    for delta in deltas:
        emitted += delta
        assert expected.startswith(emitted)
        assert "\ufffd" not in delta


ALPHABET = "abST 日本é🎉"
stop_lists = st.lists(st.text(alphabet=ALPHABET, min_size=1, max_size=4), max_size=3)
cut_lists = st.lists(st.integers(0, 200), max_size=12)


@given(text=st.text(alphabet=ALPHABET, max_size=40), cuts=cut_lists, stop_strs=stop_lists,
       stop_token=st.sampled_from([None, BYTES.eos_token_id, ord("b")]))
def test_byte_level_deltas_join_to_the_trimmed_text(text, cuts, stop_strs, stop_token):
    check_stream(BYTES, text, cuts, stop_strs, stop_token)


@pytest.fixture(scope="module")
def hf_tokenizers(tmp_path_factory):
    return {kind: get_tokenizer(train_tokenizer(kind, tmp_path_factory.mktemp(kind))) for kind in KINDS}


@settings(max_examples=60, deadline=None)
@given(kind=st.sampled_from(KINDS), text=st.text(alphabet=ALPHABET, max_size=40), cuts=cut_lists,
       stop_strs=stop_lists, use_eos=st.booleans())
def test_hf_deltas_join_to_the_trimmed_text(hf_tokenizers, kind, text, cuts, stop_strs, use_eos):
    tok = hf_tokenizers[kind]
    check_stream(tok, text, cuts, stop_strs, tok.eos_token_id if use_eos else None)
