"""Prefix-cache control (issue 32): the planned hit rate through a real tokenizer, the cache-bust tag,
the server's cached_tokens per request and the measured hit rate against the scripted server."""

from __future__ import annotations

import json

import pytest

from loadgen.api import plan_run
from loadgen.cli import main
from loadgen.measure.records import RequestRecord
from loadgen.plan.config import DatasetConfig
from loadgen.plan.datasets import build_prompts
from loadgen.plan.lengths import FileTokenizer
from loadgen.plan.prefix_cache import BUST_TAG_LEN, bust_tag, planned_hits
from loadgen.report.html import render
from loadgen.run.sse import MalformedSSE, parse_stream, parse_whole
from tests.loadgen.test_compat import _tiny_tokenizer_dir

BLOCK = 16  # tokens per KV block (vLLM's default): a server's cache hits whole blocks


def _common(a: list, b: list) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _block_hits(ids: list[list[int]], num_warm: int) -> int:
    """What a block prefix cache would hit: per prompt after the warm-up ones, its longest common
    prefix with any earlier prompt, cut to whole blocks."""
    return sum(max(_common(ids[i], ids[j]) for j in range(i)) // BLOCK * BLOCK
               for i in range(num_warm, len(ids)))


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return FileTokenizer(str(_tiny_tokenizer_dir(tmp_path_factory.mktemp("tok"))))


@pytest.mark.parametrize("rate", [0.25, 0.5, 0.875])
def test_planned_shared_tokens_are_the_chosen_rate_through_a_tokenizer(tokenizer, rate):
    cfg = DatasetConfig(name="random", num_prompts=13, random_input_len=128, random_output_len=4,
                        random_range_ratio=1.0, prefix_cache_hit_rate=rate)
    prompts = build_prompts(cfg, tokenizer)
    ids = [tokenizer.encode(p.prompt) for p in prompts]
    assert [len(i) for i in ids] == [p.input_len for p in prompts]  # lengths as counted
    warm, measured = prompts[:1], prompts[1:]
    plan = planned_hits(warm, measured)
    # The prompts' own tokens, cut to blocks, share exactly what was planned, and that is the rate
    # of the lengths asked (128 each; a fit may end a token off, which the planned rate shows).
    assert _block_hits(ids, 1) == plan["planned_cached_tokens"] == round(rate * 128) * 12
    assert plan["planned_cached_tokens"] / (128 * 12) == rate
    assert plan["planned_hit_rate"] == pytest.approx(rate, rel=0.01)


def test_without_a_warm_up_the_first_prompt_hits_nothing_and_random_lengths_share_what_they_can():
    cfg = DatasetConfig(name="random", num_prompts=40, random_input_len=200, random_output_len=4,
                        random_range_ratio=0.5, prefix_cache_hit_rate=0.5, seed=3)
    prompts = build_prompts(cfg)
    words = [p.prompt.split() for p in prompts]
    assert [len(w) for w in words] == [p.input_len for p in prompts]
    assert [p.shared_len for p in prompts] == [round(0.5 * p.input_len) for p in prompts]
    # Without a tokenizer a word is a token: the longest common prefix (words) is at least the planned
    # hit, and the planned hit is the shared part, less where no earlier prompt's was as long.
    plan = planned_hits([], prompts)
    longest, expected = 0, 0
    for p in prompts:
        expected += min(p.shared_len, longest)
        longest = max(longest, p.shared_len)
    assert plan["planned_cached_tokens"] == expected
    hits = [max((_common(w, words[j]) for j in range(i)), default=0) for i, w in enumerate(words)]
    assert hits[0] == 0 and all(h >= min(p.shared_len, max(q.shared_len for q in prompts[:i]))
                                for i, (h, p) in enumerate(zip(hits, prompts, strict=True)) if i)
    assert plan["planned_hit_rate"] < 0.5


def test_cache_bust_tags_each_prompt_from_its_salt(tokenizer):
    base = DatasetConfig(name="random", num_prompts=6, random_input_len=64, random_output_len=4, random_range_ratio=1.0)
    plain = build_prompts(base, tokenizer)
    a = build_prompts(DatasetConfig(**{**vars(base), "cache_bust": "a"}), tokenizer)
    again = build_prompts(DatasetConfig(**{**vars(base), "cache_bust": "a"}), tokenizer)
    b = build_prompts(DatasetConfig(**{**vars(base), "cache_bust": "b"}), tokenizer)
    assert a == again and a != b
    ids = [tokenizer.encode(p.prompt) for p in a + b]
    assert all(p.input_len == len(i) for p, i in zip(a + b, ids, strict=True))
    # No two prompts (of one salt or of two) share a whole first block, and each ends as it did.
    assert all(_common(ids[i], ids[j]) < BLOCK for i in range(len(ids)) for j in range(i))
    assert all(p.prompt.endswith(q.prompt) for p, q in zip(a, plain, strict=True))


def test_cache_bust_with_sharing_puts_the_runs_tag_first_and_keeps_the_rate(tokenizer):
    cfg = DatasetConfig(name="random", num_prompts=9, random_input_len=128, random_output_len=4,
                        random_range_ratio=1.0, prefix_cache_hit_rate=0.5, cache_bust="x")
    prompts = build_prompts(cfg, tokenizer)
    other = build_prompts(DatasetConfig(**{**vars(cfg), "cache_bust": "y"}), tokenizer)
    ids = [tokenizer.encode(p.prompt) for p in prompts]
    assert _block_hits(ids, 1) == planned_hits(prompts[:1], prompts[1:])["planned_cached_tokens"] == 64 * 8
    assert max(_common(tokenizer.encode(p.prompt), i) for p in other for i in ids) < BLOCK
    tiny = build_prompts(DatasetConfig(**{**vars(cfg), "prefix_cache_hit_rate": 0.01}), tokenizer)
    tag = bust_tag("x", "run", tokenizer)  # BUST_TAG_LEN tokens as fitted (a fit may end one off)
    assert {p.shared_len for p in tiny} == {len(tag)} and abs(len(tag) - BUST_TAG_LEN) <= 1


@pytest.mark.parametrize(("changes", "match"), [
    ({"prefix_cache_hit_rate": 1.5}, r"in \[0, 1\]"),
    ({"prefix_cache_hit_rate": 0.5, "name": "shared-prefix"}, "random"),
    ({"prefix_cache_hit_rate": 0.5, "random_prefix_len": 8}, "random-prefix-len"),
    ({"cache_bust": "", "name": "random-ids"}, "not for --dataset random-ids"),
])
def test_bad_combinations_are_refused(changes, match):
    with pytest.raises(ValueError, match=match):
        DatasetConfig(**changes)


USAGE = (b'data: {"choices":[],"usage":{"prompt_tokens":300,"completion_tokens":1,'
         b'"prompt_tokens_details":{"cached_tokens":256}}}\n\n')


def _rec() -> RequestRecord:
    return RequestRecord(index=0, worker=0, intended_ns=0, start_ns=0, end_ns=0)


def test_cached_tokens_are_read_from_streamed_and_whole_usage():
    tok = b'data: {"choices":[{"index":0,"delta":{"content":"a"}}]}\n\n'
    rec = _rec()
    parse_stream(rec, [tok, USAGE, b"data: [DONE]\n\n"], [1, 2, 3])
    assert (rec.usage_prompt_tokens, rec.usage_cached_tokens) == (300, 256)
    rec = _rec()
    parse_stream(rec, [tok, USAGE.replace(b',"prompt_tokens_details":{"cached_tokens":256}', b""),
                       b"data: [DONE]\n\n"], [1, 2, 3])
    assert rec.usage_cached_tokens is None
    rec = _rec()
    parse_whole(rec, b'{"choices":[{"index":0,"text":"a"}],"usage":{"prompt_tokens":9,"completion_tokens":1,'
                     b'"prompt_tokens_details":null}}', 5)
    assert (rec.usage_prompt_tokens, rec.usage_cached_tokens) == (9, None)
    rec = _rec()
    parse_whole(rec, b'{"choices":[{"index":0,"text":"a"}],"usage":{"prompt_tokens":9,"completion_tokens":1,'
                     b'"prompt_tokens_details":{"cached_tokens":8}}}', 5)
    assert rec.usage_cached_tokens == 8


def _run(server, tmp_path, name: str, *flags: str) -> dict:
    out = tmp_path / f"{name}.json"
    rc = main(["--base-url", server.base_url, "--num-prompts", "8", "--concurrency", "1", "--random-input-len", "256",
               "--random-range-ratio", "1", "--random-output-len", "4", "--no-server-metrics",
               "--output", str(out), *flags])
    assert rc == 0
    return json.loads(out.read_text())


def test_measured_hit_rate_follows_the_plan_and_cache_bust_stops_hits_across_runs(start_server, tmp_path, capsys):
    server = start_server("--prefix-cache", "--ttft-ms", "1", "--gap-ms", "1")
    shared = _run(server, tmp_path, "shared", "--prefix-cache-hit-rate", "0.5", "--warmup", "1")
    printed = " ".join(capsys.readouterr().out.split())
    assert "prefix-cache hit rate planned 0.500 (shared with an earlier prompt) measured 0.500" in printed, printed
    assert shared["dataset"]["planned_hit_rate"] == 0.5
    assert shared["summary"]["prefix_cache"] == {"cached_tokens": 1024, "prompt_tokens": 2048, "num_requests": 8,
                                                 "measured_hit_rate": 0.5}
    # The same prompts again hit what the first run left; with --cache-bust nothing does.
    again = _run(server, tmp_path, "again", "--prefix-cache-hit-rate", "0.5", "--warmup", "1")
    assert again["summary"]["prefix_cache"]["measured_hit_rate"] == 1.0
    busts = [_run(server, tmp_path, f"bust{i}", "--prefix-cache-hit-rate", "0.5", "--warmup", "1", "--cache-bust")
             for i in range(2)]
    assert busts[0]["dataset"]["cache_bust"] != busts[1]["dataset"]["cache_bust"]
    assert [b["summary"]["prefix_cache"]["measured_hit_rate"] for b in busts] == [0.5, 0.5]
    page = render([shared, busts[0]], ["shared", "bust"])
    assert "<h2>Prefix cache and rate stages</h2>" in page and busts[0]["dataset"]["cache_bust"] in page
    assert "<td>measured (server cached_tokens / prompt tokens)</td><td class='num'>0.50</td>" in page
    plain = [_run(server, tmp_path, f"plain{i}", "--cache-bust", "--seed", "7") for i in range(2)]
    assert [p["summary"]["prefix_cache"]["cached_tokens"] for p in plain] == [0, 0]
    assert plain[1]["flags"]["cache-bust"] == ""  # replayed, a run gets a fresh salt again
    assert plan_run(plain[1]["flags"]).dataset.cache_bust == ""


@pytest.mark.parametrize("details", [b'{"cached_tokens":-1}', b'{"cached_tokens":9223372036854775808}', b'"many"'])
def test_a_broken_cached_tokens_fails_its_request_in_one_line(details):
    body = USAGE.replace(b'{"cached_tokens":256}', details)
    with pytest.raises(MalformedSSE, match="undecodable"):
        parse_stream(_rec(), [body, b"data: [DONE]\n\n"], [1, 2])
