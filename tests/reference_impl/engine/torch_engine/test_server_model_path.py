"""A server started with ``--model-path`` alone (as with SGLang or vLLM) takes the tokenizer
from that directory: greedy text through the server equals transformers' ``generate`` on the
same weights, tokenized and detokenized by that directory's tokenizer.json."""

from __future__ import annotations

import httpx
import pytest
import torch

from reference_impl.config import ServerArgs
from reference_impl.tokenizer import HFTokenizer
from tests.reference_impl.conftest import ServerProcess
from tests.reference_impl.tokenizer.hf_builders import train_tokenizer

transformers = pytest.importorskip("transformers")

MAX_TOKENS = 24
PROMPTS = ["The quick brown fox", "A café in Zürich", "stop tokens and"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A random Llama over a byte-level BPE tokenizer trained here, saved side by side."""
    path = tmp_path_factory.mktemp("llama-with-tokenizer")
    train_tokenizer("byte_bpe", path)
    config = transformers.LlamaConfig(
        vocab_size=HFTokenizer(path).vocab_size, hidden_size=64, intermediate_size=128,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=512, tie_word_embeddings=False)
    torch.manual_seed(3)
    transformers.LlamaForCausalLM(config).save_pretrained(path)
    return path


def test_model_path_alone_sets_the_tokenizer_path(model_dir, tmp_path):
    assert ServerArgs(engine="torch", model_path=str(model_dir)).tokenizer_path == str(model_dir)
    (tmp_path / "config.json").write_text((model_dir / "config.json").read_text())
    assert ServerArgs(engine="torch", model_path=str(tmp_path)).tokenizer_path is None


def test_greedy_text_with_model_path_alone_equals_transformers(model_dir):
    hf = transformers.LlamaForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    tokenizer = HFTokenizer(model_dir)
    srv = ServerProcess("--engine", "torch", "--device", "cpu", "--model-path", str(model_dir),
                        "--max-total-tokens", "8192").wait_ready()
    try:
        model = httpx.get(srv.url + "/v1/models").json()["data"][0]["id"]
        for prompt in PROMPTS:
            ids = tokenizer.encode(prompt)
            expected = hf.generate(torch.tensor([ids]), max_new_tokens=MAX_TOKENS, do_sample=False,
                                   eos_token_id=None, pad_token_id=0)[0, len(ids):].tolist()
            body = {"model": model, "prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0,
                    "ignore_eos": True}
            response = httpx.post(srv.url + "/v1/completions", json=body, timeout=120)
            assert response.status_code == 200, response.text
            data = response.json()
            assert data["usage"]["prompt_tokens"] == len(ids)
            # NOTE: a character cut by max_tokens is dropped at the finish, not sent as U+FFFD.
            text, whole = data["choices"][0]["text"], tokenizer.decode(expected)
            assert whole.startswith(text) and text.rstrip("\ufffd") == whole.rstrip("\ufffd")
    finally:
        srv.stop()
