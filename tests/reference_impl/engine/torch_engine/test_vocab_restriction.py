"""A model whose vocabulary is larger than the serving tokenizer's (the random Llama-3-shaped
models under the embedded byte-level tokenizer): sampling keeps to the ids the tokenizer
decodes, so streamed text follows the output tokens; a tokenizer with ids past the model's
vocabulary is refused at start-up in one line."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from reference_impl.engine.base import ForwardBatch
from reference_impl.engine.torch_engine.random_model import SHAPES, write_random_model_dir
from reference_impl.engine.torch_engine.sampling import blocked_ids_mask
from reference_impl.subprocess_server import ServerProcess
from reference_impl.tokenizer import ByteLevelTokenizer
from tests.reference_impl.engine.torch_engine.helpers import make_engine, make_req

TOKENIZER_VOCAB = ByteLevelTokenizer().vocab_size
ROOT = Path(__file__).resolve().parents[4]


@pytest.fixture(scope="module")
def llama3_vocab_dir(tmp_path_factory) -> Path:
    """A weightless toy model with Llama 3's 128,256-id vocabulary."""
    assert SHAPES["llama3-tiny"].vocab_size == 128256
    return write_random_model_dir("llama3-tiny", tmp_path_factory.mktemp("llama3-tiny"))


def test_the_mask_blocks_exactly_the_ids_past_the_tokenizer():
    blocked = blocked_ids_mask(ByteLevelTokenizer(), 1000, torch.device("cpu"))
    assert blocked.shape == (1000,) and blocked.dtype == torch.bool
    assert not blocked[:TOKENIZER_VOCAB].any() and blocked[TOKENIZER_VOCAB:].all()
    assert blocked_ids_mask(ByteLevelTokenizer(), TOKENIZER_VOCAB, torch.device("cpu")) is None


def test_sampled_ids_all_decode_from_a_128k_vocabulary(llama3_vocab_dir):
    engine, storage = make_engine(llama3_vocab_dir)
    reqs = [make_req(f"r{i}", [256, *b"hello"], storage, max_new=40, temperature=t, seed=i)
            for i, t in enumerate([1.0, 1.0, 0.0, 2.0])]
    sampled = []
    for step in range(32):
        ids = engine.forward(ForwardBatch(step == 0, reqs))
        for req, token in zip(reqs, ids, strict=True):
            req.output_ids.append(token)
        sampled += ids
    # NOTE: unmasked, a random 128K-vocabulary model samples ids past 259 almost every time.
    assert max(sampled) < TOKENIZER_VOCAB, sorted(set(sampled))[-5:]
    assert len(set(sampled)) > 20  # sampling still spreads over the tokenizer's ids


def test_a_tokenizer_with_ids_past_the_model_vocabulary_is_refused(tmp_path):
    # EOS (257) is inside a 258-id vocabulary; pad and unk (258, 259) are not
    config = dataclasses.replace(SHAPES["llama3-tiny"], vocab_size=258)
    with pytest.raises(ValueError, match="tokenizer has 260 ids, the model's vocabulary only 258"):
        make_engine(write_random_model_dir(config, tmp_path / "m"))


def test_server_streams_a_content_event_for_most_output_tokens(llama3_vocab_dir, tmp_path):
    """The CPU form of ``gpu_check.sh serve``: loadgen against the server on the 128K-vocabulary
    model. Byte tokens that start a multi-byte character stream with the next one, so random
    bytes give about 0.8 content events per token; unmasked about 0.02."""
    srv = ServerProcess("--engine", "torch", "--device", "cpu", "--model-path",
                        str(llama3_vocab_dir), "--max-total-tokens", "8192").wait_ready()
    out = tmp_path / "loadgen.json"
    try:
        done = subprocess.run(
            [sys.executable, "-m", "loadgen", "--base-url", srv.url, "--concurrency", "4",
             "--num-prompts", "8", "--random-input-len", "32", "--random-output-len", "48",
             "--random-range-ratio", "1", "--ignore-eos", "--timeout", "240",
             "--output", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=280)
    finally:
        srv.stop()
    assert done.returncode == 0, done.stderr[-2000:]
    run = json.loads(out.read_text())
    assert run["completed"] == 8 and run["failed"] == 0
    assert run["total_output_tokens"] == 8 * 48
    events, tokens = run["total_output_tokens_client"], run["total_output_tokens"]
    assert events >= 0.6 * tokens, f"{events} content events for {tokens} output tokens"
