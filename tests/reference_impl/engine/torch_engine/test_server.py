"""Greedy generation through a running ``--engine torch --device cpu`` server, streamed and
not, equals Hugging Face ``transformers``' greedy generation on the same weights."""

from __future__ import annotations

import codecs
import concurrent.futures

import httpx
import pytest
import torch

from reference_impl.engine.torch_engine import load_model, save_safetensors
from reference_impl.tokenizer import ByteLevelTokenizer
from reference_impl.tokenizer.byte_level import ids_to_bytes
from tests.reference_impl.conftest import ServerProcess, stream_chunks

MODEL = "reference-torch"

transformers = pytest.importorskip("transformers")

MAX_TOKENS = 40
MESSAGES = [[{"role": "user", "content": "Grüße aus 東京 🚀"}], [{"role": "user", "content": "hi"}]]


@pytest.fixture(scope="module")
def server():
    srv = ServerProcess("--engine", "torch", "--device", "cpu", "--max-total-tokens", "16384",
                        "--context-length", "1024").wait_ready()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def hf_greedy(tmp_path_factory):
    """Token ids of transformers' greedy generation for a prompt's ids (EOS included)."""
    path = tmp_path_factory.mktemp("embedded")
    save_safetensors(load_model(None, torch.device("cpu"), torch.float32), path)
    hf = transformers.LlamaForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    eos = ByteLevelTokenizer().eos_token_id

    def generate(prompt_ids: list[int]) -> list[int]:
        out = hf.generate(torch.tensor([prompt_ids]), max_new_tokens=MAX_TOKENS, do_sample=False,
                          eos_token_id=eos, pad_token_id=eos)
        return out[0, len(prompt_ids):].tolist()

    return generate


def _chat_prompt_ids(messages: list[dict]) -> list[int]:
    tokenizer = ByteLevelTokenizer()
    return tokenizer.encode(tokenizer.apply_chat_template(messages))


def _chat(url: str, messages: list[dict]) -> tuple[str, int, str]:
    body = {"model": MODEL, "messages": messages, "max_tokens": MAX_TOKENS, "temperature": 0}
    response = httpx.post(url + "/v1/chat/completions", json=body, timeout=120)
    assert response.status_code == 200, response.text
    data = response.json()
    choice = data["choices"][0]
    return choice["message"]["content"], data["usage"]["completion_tokens"], choice["finish_reason"]


def _chat_streamed(url: str, messages: list[dict]) -> str:
    body = {"model": MODEL, "messages": messages, "max_tokens": MAX_TOKENS, "temperature": 0}
    chunks, last = stream_chunks(url, "/v1/chat/completions", body)
    assert last == "[DONE]"
    return "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])


@pytest.mark.parametrize("messages", MESSAGES)
def test_greedy_chat_equals_transformers_streamed_and_not(server, hf_greedy, messages):
    expected_ids = hf_greedy(_chat_prompt_ids(messages))
    expected_text = ByteLevelTokenizer().decode(expected_ids)
    text, num_tokens, finish = _chat(server.url, messages)
    assert text == expected_text
    assert num_tokens == len(expected_ids)
    assert finish == ("stop" if expected_ids[-1] == ByteLevelTokenizer().eos_token_id else "length")
    assert _chat_streamed(server.url, messages) == expected_text


def test_greedy_completion_from_ids_equals_transformers(server, hf_greedy):
    prompt = [256, *b"The cache "]
    body = {"model": MODEL, "prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0,
            "ignore_eos": True}
    chunks, _ = stream_chunks(server.url, "/v1/completions", body)
    streamed = "".join(c["choices"][0]["text"] for c in chunks if c["choices"])
    expected = hf_greedy(prompt)
    # NOTE: a character cut by max_tokens is dropped at the finish, not sent as U+FFFD.
    text = codecs.getincrementaldecoder("utf-8")("replace").decode(ids_to_bytes(expected), final=False)
    if ByteLevelTokenizer().eos_token_id not in expected:
        assert streamed == text
    else:
        assert streamed.startswith(text)


def test_concurrent_seeded_sampling_streams_the_non_streamed_text(server):
    messages = [{"role": "user", "content": "naïve café"}]
    body = {"model": MODEL, "messages": messages, "max_tokens": MAX_TOKENS, "temperature": 0.8,
            "top_p": 0.9, "top_k": 50, "seed": 11}

    def non_streamed(_):
        response = httpx.post(server.url + "/v1/chat/completions", json=body, timeout=120)
        return response.json()["choices"][0]["message"]["content"]

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        texts = list(pool.map(non_streamed, range(4)))
    chunks, _ = stream_chunks(server.url, "/v1/chat/completions", body)
    streamed = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert len(set(texts)) == 1 and streamed == texts[0]
