"""`--dataset random-ids` draws from the target's vocabulary: the tokenizer file's, `--vocab-size`, or
the size the server's `/detokenize` accepts; refused in one line when none tells it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadgen.cli import main
from loadgen.plan import lengths
from loadgen.plan.lengths import VOCAB_FILE, VOCAB_FLAG, VOCAB_SERVER, probe_vocab_size
from reference_impl.subprocess_server import ServerProcess

EMBEDDED = str(Path(__file__).parents[2] / "reference_impl/tokenizer/embedded")
# NOTE: the reference server's byte-level vocabulary: 256 bytes and 4 special tokens.
REFERENCE_VOCAB = 260


@pytest.fixture(scope="module")
def url():
    srv = ServerProcess().wait_ready()
    yield srv.url
    srv.stop()


def _run(url: str, tmp_path, *flags: str) -> tuple[int, dict | None]:
    out = tmp_path / "ids.json"
    rc = main(["--base-url", url, "--backend", "openai-completions", "--dataset", "random-ids", "--quiet",
               "--num-prompts", "16", "--concurrency", "4", "--random-input-len", "64", "--random-output-len", "4",
               "--no-server-metrics", "--output", str(out), *flags])
    return rc, json.loads(out.read_text()) if out.exists() else None


@pytest.mark.parametrize(("flags", "vocab", "source"), [
    ((), REFERENCE_VOCAB, VOCAB_SERVER),  # was: 16 of 16 failed with 400 (ids from a 32,000-id vocabulary)
    (("--vocab-size", "200", "--no-server-tokenize"), 200, VOCAB_FLAG),
    (("--tokenizer", EMBEDDED, "--flags-from", "vllm"), 256, VOCAB_FILE),
], ids=["server", "flag", "tokenizer"])
def test_random_ids_against_the_reference_server_all_succeed(url, tmp_path, flags, vocab, source):
    rc, data = _run(url, tmp_path, *flags)
    assert rc == 0 and data["completed"] == 16 and data["failed"] == 0, data
    assert data["dataset"]["vocab_size"] == vocab and data["dataset"]["vocab_from"] == source


def test_random_ids_without_a_way_to_the_vocabulary_is_refused_in_one_line(url, tmp_path, capsys):
    rc, data = _run(url, tmp_path, "--no-server-tokenize")
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and data is None
    assert "give --tokenizer (the model's tokenizer file) or --vocab-size N" in err[-1], err


def test_the_probe_finds_the_reference_servers_vocabulary(url):
    assert probe_vocab_size(url, {}, 30) == (REFERENCE_VOCAB, "")


def test_the_probe_says_why_it_cannot_tell(start_server, monkeypatch):
    size, why = probe_vocab_size(start_server("--no-tokenize").base_url, {}, 30)
    assert size is None and why == "HTTP 404 from /detokenize"
    # NOTE: the scripted server decodes every byte id 0..255 without a range check: with the search
    # capped below that, every id probed is accepted, so no bound is claimed.
    monkeypatch.setattr(lengths, "MAX_PROBED_VOCAB", 128)
    size, why = probe_vocab_size(start_server().base_url, {}, 30)
    assert size is None and "accepted every id up to 128" in why
