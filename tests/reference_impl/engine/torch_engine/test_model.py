"""Logits parity with Hugging Face ``transformers`` (float32): prefill, 32 decode steps,
a cached prefix and a mixed extend + decode step, for the embedded default and for a random
HF-format checkpoint loaded from disk."""

from __future__ import annotations

import pytest
import torch

from tests.reference_impl.engine.torch_engine.helpers import (
    hf_last_logits,
    hf_model_like,
    make_engine,
    make_req,
    rel_err,
)

transformers = pytest.importorskip("transformers")

TOL = 1e-4
PROMPTS = [[256, *b"Hi"], [256, *"Grüße aus 東京 🚀, naïve café?".encode()], list(range(40, 97))]


@pytest.fixture(scope="module")
def random_checkpoint(tmp_path_factory):
    """A random untied Llama (explicit head_dim, Llama 3 RoPE scaling) saved by transformers."""
    config = transformers.LlamaConfig(
        vocab_size=300, hidden_size=96, intermediate_size=160, num_hidden_layers=2,
        num_attention_heads=6, num_key_value_heads=2, head_dim=24, max_position_embeddings=512,
        tie_word_embeddings=False, rms_norm_eps=1e-5,
        rope_parameters={"rope_type": "llama3", "rope_theta": 50000.0, "factor": 8.0,
                         "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 64})
    torch.manual_seed(1)
    model = transformers.LlamaForCausalLM(config)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.add_(0.2 * torch.randn_like(param))
    path = tmp_path_factory.mktemp("random-llama")
    model.save_pretrained(path)
    return path


@pytest.fixture(scope="module", params=["embedded", "checkpoint"])
def engines(request, tmp_path_factory):
    """(our engine, its storage kit, HF model on the same weights)."""
    path = None if request.param == "embedded" else request.getfixturevalue("random_checkpoint")
    engine, storage = make_engine(path)
    hf = hf_model_like(engine, tmp_path_factory.mktemp("hf"))
    return engine, storage, hf


def _check(engine_logits: torch.Tensor, hf, sequences: list[list[int]]) -> None:
    for row, ids in zip(engine_logits, sequences, strict=True):
        assert rel_err(row, hf_last_logits(hf, ids)) < TOL


def test_prefill_and_32_decode_steps_match_transformers(engines):
    engine, storage, hf = engines
    reqs = [make_req(f"p{i}", ids, storage) for i, ids in enumerate(PROMPTS)]
    logits = engine.compute_logits(reqs)
    _check(logits, hf, PROMPTS)
    for _ in range(32):
        for req, row in zip(reqs, logits, strict=True):
            req.output_ids.append(int(row.argmax()))
        logits = engine.compute_logits(reqs)
        _check(logits, hf, [list(r.origin_input_ids) + list(r.output_ids) for r in reqs])
    for req in reqs:
        engine.release(req)


def test_cached_prefix_and_mixed_step_match_transformers(engines):
    engine, storage, hf = engines
    first = make_req("first", PROMPTS[1], storage)
    logits = engine.compute_logits([first])
    for _ in range(5):
        first.output_ids.append(int(logits[0].argmax()))
        logits = engine.compute_logits([first])
    first.output_ids.append(int(logits[0].argmax()))
    engine.release(first)  # its prompt and the first 5 outputs are now cached
    running = make_req("running", PROMPTS[0], storage)
    engine.compute_logits([running])
    running.output_ids.append(7)
    prefix = list(first.origin_input_ids) + list(first.output_ids[:5])
    follower = make_req("follower", prefix + [*b" and more"], storage)
    cached_before = engine.num_cached_tokens
    logits = engine.compute_logits([running, follower])  # decode + extend in one forward
    assert engine.num_cached_tokens - cached_before == len(prefix)
    _check(logits, hf, [PROMPTS[0] + [7], prefix + [*b" and more"]])
    follower.output_ids.append(int(logits[1].argmax()))
    logits = engine.compute_logits([follower])
    _check(logits, hf, [list(follower.origin_input_ids) + list(follower.output_ids)])
    for req in (running, follower):
        engine.release(req)
