"""Hardening round 3 (issue 23), request limits: each test failed on the code before its fix."""

from __future__ import annotations

import json
import re

import httpx

from reference_impl.hot_paths import HOT_PATHS
from reference_impl.messages import SamplingParams, TokenizedGenerateReq
from reference_impl.scheduler.request import Req
from reference_impl.server.protocol import count_content_parts
from tests.reference_impl.conftest import MODEL, ServerProcess, stream_chunks

CHAT = "/v1/chat/completions"


def _chat(url: str, **fields) -> httpx.Response:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, **fields}
    return httpx.post(url + CHAT, json=body, timeout=60)


def test_stop_token_ids_past_the_cap_get_400(server):
    response = httpx.post(server.url + "/v1/completions", timeout=60, json={
        "model": MODEL, "prompt": ["a"] * 64, "n": 16, "max_tokens": 4,
        "stop_token_ids": [i % 200 + 1 for i in range(257)]})
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == "stop_token_ids"
    assert _chat(server.url, stop_token_ids=list(range(1, 257))).status_code == 200


def test_stop_token_ids_are_one_shared_set_per_request():
    storage = HOT_PATHS["H4"].create("array")
    ids = tuple(range(1, 200))
    reqs = [Req(TokenizedGenerateReq(f"r-{i}", [1, 2], SamplingParams(8, stop_token_ids=ids), False),
                storage, 0) for i in range(4)]
    assert isinstance(reqs[0].stop_token_ids, frozenset)
    assert all(r.stop_token_ids is reqs[0].stop_token_ids for r in reqs)


def test_unknown_paths_share_one_label_series(server):
    with httpx.Client(timeout=30) as client:
        for i in range(50):
            assert client.get(f"{server.url}/no-such-path-{i}").status_code == 404
        text = client.get(server.url + "/metrics").text
    labels = set(re.findall(r'^reference:num_requests_total\{endpoint="([^"]*)"', text, re.M))
    assert labels <= {"chat", "completions", "tokenize", "detokenize", "other"}, labels
    assert re.search(r'^reference:num_requests_total\{endpoint="other",status="404"\} ([0-9.]+)$',
                     text, re.M)


def test_default_max_tokens_fits_the_kv_pool_and_a_prompt_that_cannot_fit_gets_400():
    with ServerProcess("--sim-profile", "zero", "--max-total-tokens", "1000") as srv:
        srv.wait_ready()
        response = _chat(srv.url, max_tokens=None, ignore_eos=True)
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["choices"][0]["finish_reason"] == "length"
        assert body["usage"]["total_tokens"] == 1000
        chunks, done = stream_chunks(srv.url, CHAT, {
            "model": MODEL, "messages": [{"role": "user", "content": "hi"}], "ignore_eos": True})
        assert done == "[DONE]"
        assert chunks[-1]["choices"][0]["finish_reason"] == "length"
        too_long = {"messages": [{"role": "user", "content": "x" * 1200}]}
        for fields in ({"max_tokens": 5000}, {**too_long, "max_tokens": 5}, {**too_long, "stream": True}):
            response = _chat(srv.url, **fields)
            assert response.status_code == 400, response.text
            assert "--max-total-tokens" in response.json()["error"]["message"]


def test_tokenize_applies_the_prompt_limits(server):
    response = httpx.post(server.url + "/tokenize", json={"prompt": "ab " * 140_000}, timeout=60)
    assert response.status_code == 400, response.text[:300]
    assert response.json()["error"]["param"] == "prompt"
    assert httpx.post(server.url + "/tokenize", json={"prompt": "ab"}, timeout=60).json()["count"] > 0


def test_content_parts_past_the_cap_get_400_before_validation(server):
    part = {"type": "text", "text": "a"}
    many_parts = [{"role": "user", "content": [part] * 8192}]
    many_messages = [{"role": "user", "content": "a"}] * 8193
    for path in (CHAT, "/tokenize"):
        for messages in (many_parts, many_messages):
            body = {"model": MODEL, "messages": messages, "max_tokens": 1}
            response = httpx.post(server.url + path, json=body, timeout=60)
            assert response.status_code == 400, response.text[:300]
            assert "--max-content-parts" in response.json()["error"]["message"]
    assert _chat(server.url, messages=[{"role": "user", "content": [part] * 100}]).status_code == 200


def test_count_content_parts_skims_only_chat_shapes():
    body = json.dumps({"messages": [{"role": "user", "content": [{}, {}]}, {"content": "x"}]})
    assert count_content_parts(body.encode(), 100) == 4
    assert count_content_parts(b'{"messages": 3}', 100) == 0
    assert count_content_parts(b'{"prompt": "x"}', 100) == 0
    assert count_content_parts(b"not json", 100) == 0
