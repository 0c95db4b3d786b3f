"""Trace reading on small files, in-process: each length and time bound at its edge, the error each
bad file gets, word and token prompts of exactly their length, BurstGPT rows read and sampled."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadgen.plan.config import DatasetConfig
from loadgen.plan.traces import (
    MAX_TRACE_LEN,
    MAX_TRACE_SPAN_S,
    burstgpt_prompts,
    length_bound,
    mooncake_prompts,
    read_trace,
)

BLOCK = 8
TINY_LLAMA = str(Path(__file__).parent / "fixtures/upstream/tiny_llama")


def _lines(tmp_path, rows: list[dict | str]) -> str:
    path = tmp_path / "trace.jsonl"
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return str(path)


def _row(ts: float = 0, n_in: int = 5, n_out: int = 3, **kw) -> dict:
    return {"timestamp": ts, "input_length": n_in, "output_length": n_out, **kw}


def _error(path: str, num: int | None = None, bound: tuple[int, str] = (100, "the cap")) -> str:
    with pytest.raises(ValueError) as exc:
        read_trace(path, num, bound)
    return str(exc.value)


def test_a_length_is_an_integer_from_1_to_the_bound_inclusive(tmp_path):
    ok = _lines(tmp_path, [_row(n_in=1, n_out=100)])
    assert read_trace(ok, None, (100, "the cap")) == [_row(n_in=1, n_out=100)]
    for n_in, says in [(0, "must be an integer >= 1, got 0"), (True, "must be an integer >= 1, got True"),
                       (101, "'input_length' 101 is above the cap, 100")]:
        path = _lines(tmp_path, [_row(n_in=n_in)])
        assert _error(path) == f"line 1 of {path}: " + (says if n_in == 101 else f"'input_length' {says}")


def test_read_trace_skips_blank_lines_and_names_an_empty_short_or_non_object_file(tmp_path):
    path = _lines(tmp_path, [_row(0), "", "  ", _row(10)])
    assert [r["timestamp"] for r in read_trace(path, None)] == [0, 10]
    assert _error(path, 3) == f"{path} has 2 requests; 3 were asked for (--num-prompts, --warmup)"
    empty = _lines(tmp_path, [""])
    assert _error(empty) == f"no requests in {empty}"
    listed = _lines(tmp_path, ["[1, 2]"])
    assert _error(listed) == f"line 1 of {listed} is not a JSON object"


def test_a_mooncake_trace_spans_at_most_max_trace_span_s_in_milliseconds(tmp_path):
    edge = MAX_TRACE_SPAN_S * 1e3
    assert len(read_trace(_lines(tmp_path, [_row(0), _row(edge)]), None)) == 2
    assert "MAX_TRACE_SPAN_S" in _error(_lines(tmp_path, [_row(0), _row(edge * 1.001)]))


def _mooncake(path: str, tokenizer=None, **kw) -> list:
    cfg = DatasetConfig(name="mooncake", dataset_path=path, num_prompts=None, block_size=BLOCK,
                        trace_timestamps=True, use_server_tokenize=False, **kw)
    return mooncake_prompts(cfg, tokenizer)


def test_word_prompts_are_their_length_cut_inside_a_block_and_filled_without_ids(tmp_path):
    rows = [_row(100, BLOCK + 3, hash_ids=[0, 1]), _row(140, 2 * BLOCK + 4, hash_ids=[0]), _row(150, 6)]
    prompts = _mooncake(_lines(tmp_path, rows))
    assert [len(p.prompt.split(" ")) for p in prompts] == [BLOCK + 3, 2 * BLOCK + 4, 6]
    assert [(p.input_len, p.output_len, p.is_exact_input_len, p.arrival_s) for p in prompts] == [
        (BLOCK + 3, 3, False, 0.0), (2 * BLOCK + 4, 3, False, 0.04), (6, 3, False, 0.05)]
    assert prompts[0].prompt.split()[:BLOCK] == prompts[1].prompt.split()[:BLOCK]


def test_a_block_is_the_same_words_however_far_earlier_prompts_drew_it(tmp_path):
    alone = _mooncake(_lines(tmp_path, [_row(0, BLOCK + 2, hash_ids=[7])]))[0].prompt.split()
    after = _mooncake(_lines(tmp_path, [_row(0, 5, hash_ids=[7]), _row(1, BLOCK + 2, hash_ids=[7])]))
    assert after[1].prompt.split()[:BLOCK] == alone[:BLOCK] and after[0].prompt.split() == alone[:5]


def _context_tokenizer(context: int):
    """tiny_llama's tokenizer with the context a server's /tokenize would report."""
    from loadgen.plan.lengths import FileTokenizer

    tok = FileTokenizer(TINY_LLAMA)
    tok.max_model_len = context
    return tok


def test_token_prompts_are_exact_and_bounded_by_the_models_context(tmp_path):
    tok = _context_tokenizer(40)
    rows = [_row(0, 40, hash_ids=[0, 1]), _row(5, 3, hash_ids=[0]), _row(9, 7)]
    prompts = _mooncake(_lines(tmp_path, rows), tok)
    assert [(p.input_len, p.is_exact_input_len) for p in prompts] == [(40, True), (3, True), (7, True)]
    assert [len(tok.encode(p.prompt)) for p in prompts] == [40, 3, 7]
    # a block of 10^7 tokens is fitted at the context's 40 (no prompt is longer), not built whole
    huge = DatasetConfig(name="mooncake", dataset_path=_lines(tmp_path, rows), num_prompts=None, block_size=10**7,
                         trace_timestamps=True, use_server_tokenize=False)
    assert [len(tok.encode(p.prompt)) for p in mooncake_prompts(huge, tok)] == [40, 3, 7]
    too_long = _lines(tmp_path, [_row(0, 41)])
    with pytest.raises(ValueError, match=r"'input_length' 41 is above the model's context .*, 40$"):
        _mooncake(too_long, tok)


BURST_HEAD = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"


def _burst(tmp_path, rows: list[str], num: int | None, replay: bool, tokenizer=None, seed: int = 0) -> list:
    path = tmp_path / "burst.csv"
    path.write_text(BURST_HEAD + "".join(r + "\n" for r in rows))
    cfg = DatasetConfig(name="burstgpt", dataset_path=str(path), num_prompts=num, trace_timestamps=replay,
                        use_server_tokenize=False, seed=seed)
    return burstgpt_prompts(cfg, tokenizer)


ROWS = [f"{i},GPT-4,{10 + i},{5 + i},1,API log" for i in range(5)]


def test_burstgpt_sampling_keeps_every_row_once_or_draws_with_replacement_from_fewer(tmp_path):
    everything = _burst(tmp_path, ROWS, None, replay=False)
    assert [p.input_len for p in everything] == [10, 11, 12, 13, 14]  # all rows, in file order
    same = _burst(tmp_path, ROWS, 5, replay=False)
    assert sorted(p.input_len for p in same) == [10, 11, 12, 13, 14]  # as many as asked: each once
    more = _burst(tmp_path, ROWS[:2], 6, replay=False)
    assert len(more) == 6 and {p.input_len for p in more} == {10, 11}
    with pytest.raises(ValueError, match=r"^no GPT-4 rows with response tokens in .*burst\.csv$"):
        _burst(tmp_path, ["1,ChatGPT,5,5,1,API log"], 3, replay=False)


def test_burstgpt_lengths_are_bounded_by_the_models_context(tmp_path):
    tok = _context_tokenizer(40)
    assert [p.input_len for p in _burst(tmp_path, ["1,GPT-4,40,5,1,API log"], 1, replay=True, tokenizer=tok)] == [40]
    with pytest.raises(ValueError, match=r"'Request tokens' 41 is above the model's context .*, 40$"):
        _burst(tmp_path, ["1,GPT-4,41,5,1,API log"], 1, replay=True, tokenizer=tok)


def test_a_burstgpt_replay_reads_no_further_than_its_rows_and_a_sample_follows_its_seed(tmp_path):
    # the small, in-process form of test_trace.py's bounded-memory test (too slow under mutation)
    replay = _burst(tmp_path, [*ROWS, "nan,GPT-4,nan,nan,1,API log"], 2, replay=True)
    assert [(p.arrival_s, p.input_len, p.output_len) for p in replay] == [(0.0, 10, 5), (1.0, 11, 6)]
    rows = [f"{i},GPT-4,{10 + i},5,1,API log" for i in range(40)]
    picked = _burst(tmp_path, rows, 4, replay=False)
    assert picked == _burst(tmp_path, rows, 4, replay=False) != _burst(tmp_path, rows, 4, replay=False, seed=2)


def test_timestamps_are_numbers_in_time_order_equal_allowed_and_the_span_counts_from_the_first(tmp_path):
    path = _lines(tmp_path, [_row("5")])
    assert _error(path) == f"line 1 of {path}: 'timestamp' must be a finite number >= 0, got '5'"
    assert len(read_trace(_lines(tmp_path, [_row(5), _row(5)]), None)) == 2
    path = _lines(tmp_path, [_row(5), _row(4)])
    assert _error(path) == f"line 2 of {path}: timestamp 4 is before the previous request's 5 (a trace is in time order)"
    late_start = 5 * 10**10  # ms: the span is counted from the first line, not from zero
    assert len(read_trace(_lines(tmp_path, [_row(late_start), _row(late_start + 1)]), None)) == 2
    path = _lines(tmp_path, [_row(10**10), _row(16 * 10**10)])
    assert _error(path).endswith("timestamp 160000000000 is 1.5e+08 s after the first request's; a trace spans "
                                 "at most MAX_TRACE_SPAN_S = 1e+08 s")


def test_the_context_bounds_lengths_only_below_loadgens_own_cap():
    class Probed:
        max_model_len = MAX_TRACE_LEN

    assert length_bound(Probed()) == (MAX_TRACE_LEN, "loadgen's cap on a trace length (MAX_TRACE_LEN)")
    Probed.max_model_len = MAX_TRACE_LEN - 1
    assert length_bound(Probed()) == (MAX_TRACE_LEN - 1, "the model's context (max_model_len from the server's /tokenize)")


def test_burstgpt_rows_without_a_response_short_rows_and_odd_files(tmp_path):
    rows = ["1,GPT-4,12", "2,GPT-4,12,0,1,API log", "3", "4,GPT-4,0,1,1,API log", "5,GPT-4,7,0.5,1,API log",
            "6,GPT-4,9,2,1,API log"]
    prompts = _burst(tmp_path, rows, None, replay=True)
    assert [(p.arrival_s, p.input_len, p.output_len) for p in prompts] == [(0.0, 1, 1), (2.0, 9, 2)]
    # sampling does not read the time: out of order is fine
    assert len(_burst(tmp_path, ["9,GPT-4,5,5,1,API log", "1,GPT-4,5,5,1,API log"], 2, replay=False)) == 2
    span = _burst(tmp_path, ["0,GPT-4,5,5,1,API log", f"{MAX_TRACE_SPAN_S:g},GPT-4,5,5,1,API log"], 2, replay=True)
    assert [p.arrival_s for p in span] == [0.0, MAX_TRACE_SPAN_S]  # seconds, up to the span inclusive
    empty = tmp_path / "burst.csv"
    for text in ("", "Timestamp,Request tokens,Response tokens\n1,5,5\n"):  # no header; no Model column
        empty.write_text(text)
        cfg = DatasetConfig(name="burstgpt", dataset_path=str(empty), num_prompts=1, trace_timestamps=True,
                            use_server_tokenize=False)
        with pytest.raises(ValueError, match="^no GPT-4 rows"):
            burstgpt_prompts(cfg, None)
    empty.write_text("Timestamp,Model,Response tokens\n1,GPT-4,5\n")
    with pytest.raises(ValueError) as exc:
        burstgpt_prompts(cfg, None)
    assert str(exc.value) == f"line 2 of {empty}: 'Request tokens' is not a number: ''"


def test_burstgpt_prompts_with_a_tokenizer_are_exact_and_without_one_are_words(tmp_path):
    tok = _context_tokenizer(64)
    exact = _burst(tmp_path, ["1,GPT-4,12,5,1,API log", "2,GPT-4,30,5,1,API log"], 2, replay=True, tokenizer=tok)
    assert [(p.input_len, p.is_exact_input_len, len(tok.encode(p.prompt))) for p in exact] == [(12, True, 12),
                                                                                               (30, True, 30)]
    words = _burst(tmp_path, ["1,GPT-4,12,5,1,API log"], 1, replay=True)
    assert words[0].is_exact_input_len is False and len(words[0].prompt.split()) == 12


def test_a_cut_that_re_tokenises_shorter_is_topped_up_to_the_exact_length(tmp_path):
    # seed 13, line 6: block 2 and block 3 cut after 2 tokens decode to text that re-tokenises
    # shorter; fit_to_len tops it up with filler words (found by search: most cuts need no top-up)
    tok = _context_tokenizer(64)
    rows = [_row(i, 1) for i in range(5)] + [_row(5, 10, hash_ids=[2, 3])]
    prompts = _mooncake(_lines(tmp_path, rows), tok, seed=13)
    assert (len(tok.encode(prompts[5].prompt)), prompts[5].input_len, prompts[5].is_exact_input_len) == (10, 10, True)
