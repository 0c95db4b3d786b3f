"""End to end: streamed deltas equal the full text, and every form streams the same chunks."""

from __future__ import annotations

import httpx
import pytest

from tests.reference_impl.conftest import MODEL, start_servers, stream_chunks

PROMPT_TEXT = "Grüße aus 東京 🚀, naïve café?"
CONFIGS = {
    "optimized": ["--sim-profile", "zero"],
    "legacy": ["--sim-profile", "zero", "--all-legacy"],
    "optimized-incremental": ["--sim-profile", "zero", "--incremental-streaming-output"],
    "legacy-incremental": ["--sim-profile", "zero", "--all-legacy", "--incremental-streaming-output"],
    "upstream-h3": ["--sim-profile", "zero", "--stream-output", "reference-full"],
}
CHAT_CASES = [dict(n=n, stop=stop) for n in (1, 2) for stop in (False, True)]
COMPLETION_CASES = [
    dict(n=1, echo=False, stop=False, prompt="text"),
    dict(n=1, echo=True, stop=False, prompt="text"),
    dict(n=2, echo=True, stop=True, prompt="text"),
    dict(n=2, echo=False, stop=True, prompt="texts"),
    dict(n=1, echo=True, stop=True, prompt="ids"),
    dict(n=2, echo=True, stop=False, prompt="ids"),
]


@pytest.fixture(scope="module")
def servers():
    started = start_servers(CONFIGS)
    yield started
    for srv in started.values():
        srv.stop()


def _post(url: str, path: str, body: dict) -> dict:
    response = httpx.post(url + path, json=body, timeout=60)
    assert response.status_code == 200, response.text
    return response.json()


def _chat_body(case: dict, stop: str | None) -> dict:
    return {"model": MODEL, "messages": [{"role": "user", "content": PROMPT_TEXT}], "n": case["n"],
            "max_tokens": 60, "seed": 7, **({"stop": [stop]} if stop else {})}


def _completion_body(case: dict, stop: str | None) -> dict:
    prompt = {"text": PROMPT_TEXT, "texts": [PROMPT_TEXT, "¿Qué tal?"],
              "ids": list(PROMPT_TEXT.encode())}[case["prompt"]]
    return {"model": MODEL, "prompt": prompt, "n": case["n"], "echo": case.get("echo", False),
            "max_tokens": 60, "seed": 7, **({"stop": stop} if stop else {})}


def _stop_string(url: str, path: str, body: dict, text_of) -> str:
    """A stop string known to occur in the middle of the unstopped output (spanning tokens)."""
    text = text_of(_post(url, path, body)["choices"][0])
    return text[len(text) // 2: len(text) // 2 + 3]


def _deltas_by_index(chunks: list[dict], key: str) -> tuple[dict[int, str], dict[int, int]]:
    texts: dict[int, str] = {}
    finishes: dict[int, int] = {}
    for chunk in chunks:
        for choice in chunk["choices"]:
            i = choice["index"]
            value = choice["delta"].get("content") if key == "chat" else choice["text"]
            texts[i] = texts.get(i, "") + (value or "")
            if choice.get("finish_reason") is not None:
                finishes[i] = finishes.get(i, 0) + 1
    return texts, finishes


def _normalize(chunks: list[dict], key: str) -> dict[int, list[dict]]:
    """Per choice: chunks with nulls dropped, ids/timestamps gone, adjacent content merged."""
    per_index: dict[int, list[dict]] = {}
    for chunk in chunks:
        for choice in chunk["choices"]:
            item = _drop_nulls(choice)
            seq = per_index.setdefault(choice["index"], [])
            field = ("delta", "content") if key == "chat" else (None, "text")
            if seq and _is_plain_content(item, field) and _is_plain_content(seq[-1], field):
                _append_content(seq[-1], item, field)
            else:
                seq.append(item)
    return per_index


def _drop_nulls(value):
    if isinstance(value, dict):
        return {k: _drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_nulls(v) for v in value]
    return value


def _is_plain_content(item: dict, field) -> bool:
    parent, name = field
    body = item.get(parent, {}) if parent else item
    return "finish_reason" not in item and bool(body.get(name)) and "role" not in body


def _append_content(target: dict, item: dict, field) -> None:
    parent, name = field
    (target[parent] if parent else target)[name] += (item[parent] if parent else item)[name]


def _check_stream(url: str, path: str, body: dict, key: str, text_of, echoes: list[str]) -> dict:
    full = _post(url, path, body)
    chunks, last = stream_chunks(url, path, body)
    assert last == "[DONE]"
    texts, finishes = _deltas_by_index(chunks, key)
    expected = {c["index"]: text_of(c) for c in full["choices"]}
    assert texts == expected
    assert finishes == {i: 1 for i in expected}
    if key == "chat":
        for seq in _normalize(chunks, key).values():
            assert seq[0]["delta"] == {"role": "assistant", "content": ""}
    if echoes:
        n = body["n"]
        for i, text in expected.items():
            assert text.startswith(echoes[i // n])
    return _normalize(chunks, key)


@pytest.mark.parametrize("case", CHAT_CASES, ids=lambda c: f"n{c['n']}-stop{c['stop']}")
def test_chat_streams_match_full_text_in_every_form(servers, case):
    path, text_of = "/v1/chat/completions", lambda c: c.get("message", {}).get("content")
    stop = None
    if case["stop"]:
        stop = _stop_string(servers["optimized"].url, path, _chat_body(case, None), text_of)
    body = _chat_body(case, stop)
    normalized = {name: _check_stream(srv.url, path, body, "chat", text_of, [])
                  for name, srv in servers.items()}
    reference = normalized["optimized"]
    for name, chunks in normalized.items():
        assert chunks == reference, name
    if stop:
        finishes = [seq[-1] for seq in reference.values()]
        assert all(f["finish_reason"] == "stop" and f["matched_stop"] == stop for f in finishes[:1])


@pytest.mark.parametrize("case", COMPLETION_CASES,
                         ids=lambda c: f"n{c['n']}-echo{c['echo']}-stop{c['stop']}-{c['prompt']}")
def test_completion_streams_match_full_text_in_every_form(servers, case):
    path, text_of = "/v1/completions", lambda c: c["text"]
    body = _completion_body(case, None)
    if case["stop"]:
        plain = _post(servers["optimized"].url, path, {**body, "echo": False})["choices"][0]["text"]
        body = _completion_body(case, plain[len(plain) // 2: len(plain) // 2 + 3])
    prompts = body["prompt"] if case["prompt"] == "texts" else [body["prompt"]]
    echoes = [p if isinstance(p, str) else bytes(p).decode() for p in prompts] if case["echo"] else []
    normalized = {name: _check_stream(srv.url, path, body, "completions", text_of, echoes)
                  for name, srv in servers.items()}
    for name, chunks in normalized.items():
        assert chunks == normalized["optimized"], name


def test_stop_string_is_trimmed_and_reported(servers):
    url, path = servers["legacy"].url, "/v1/completions"
    body = {"model": MODEL, "prompt": PROMPT_TEXT, "max_tokens": 80, "seed": 3}
    text = _post(url, path, body)["choices"][0]["text"]
    stop = text[30:33]
    choice = _post(url, path, {**body, "stop": [stop]})["choices"][0]
    assert choice["text"] == text[: text.index(stop)]
    assert choice["finish_reason"] == "stop" and choice["matched_stop"] == stop


def test_usage_chunks(servers):
    url = servers["optimized"].url
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5, "n": 2,
            "stream_options": {"include_usage": True}}
    chunks, _ = stream_chunks(url, "/v1/chat/completions", body)
    assert all("usage" not in c for c in chunks[:-1])
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 10
    body["stream_options"] = {"continuous_usage_stats": True}
    chunks, _ = stream_chunks(url, "/v1/chat/completions", body)
    assert all(c["usage"]["prompt_tokens"] > 0 for c in chunks)
