"""Request validation and response shapes of the OpenAI protocol models."""

from __future__ import annotations

import json

import pytest
from openai.types import Completion, Model
from openai.types.chat import ChatCompletion
from pydantic import ValidationError

from reference_impl.server.protocol import (
    ChatCompletionRequest,
    ChatCompletionResponse,
    ChatCompletionResponseChoice,
    ChatMessage,
    CompletionRequest,
    CompletionResponse,
    CompletionResponseChoice,
    CompletionResponseStreamChoice,
    CompletionStreamResponse,
    ErrorResponse,
    ModelCard,
    ModelList,
    UsageInfo,
    error_body,
    validation_error_body,
)

USER = {"role": "user", "content": "Hello"}


def chat(**fields) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate({"model": "m", "messages": [USER], **fields})


def completion(**fields) -> CompletionRequest:
    return CompletionRequest.model_validate({"model": "m", "prompt": "Hi", **fields})


def test_chat_defaults():
    req = chat()
    assert (req.n, req.temperature, req.top_p, req.top_k) == (1, 1.0, 1.0, -1)
    assert req.stream is False and req.stream_options is None
    assert req.max_new_tokens is None
    assert req.stop_strs == ()
    assert not req.include_usage and not req.continuous_usage_stats


def test_chat_accepts_every_field_and_ignores_unknown_ones():
    req = chat(max_tokens=5, n=2, temperature=0, top_p=0.5, top_k=3, seed=7, stop=["a", "b"],
               stop_token_ids=[1], stream=True,
               stream_options={"include_usage": True, "continuous_usage_stats": True},
               ignore_eos=True, logprobs=True, top_logprobs=2, min_tokens=1,
               frequency_penalty=0.3, user="x", tools=[])
    assert req.stop_strs == ("a", "b")
    assert req.include_usage and req.continuous_usage_stats
    assert req.max_new_tokens == 5
    assert not hasattr(req, "frequency_penalty")


def test_max_completion_tokens_wins_over_max_tokens():
    assert chat(max_tokens=5, max_completion_tokens=9).max_new_tokens == 9


def test_stop_string_becomes_a_tuple():
    assert chat(stop="END").stop_strs == ("END",)


def test_content_parts_are_joined():
    req = chat(messages=[{"role": "user", "content": [{"type": "text", "text": "a"},
                                                       {"type": "text", "text": "b"}]}])
    assert req.messages[0].text == "a\nb"
    assert chat().messages[0].text == "Hello"


@pytest.mark.parametrize("fields, param", [
    ({"model": None}, "model"),
    ({"messages": []}, "messages"),
    ({"messages": "hello"}, "messages"),
    ({"messages": [{"role": "user"}]}, "messages"),
    ({"messages": [{"role": "wizard", "content": "x"}]}, "messages"),
    ({"messages": [{"role": "user", "content": 5}]}, "messages"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "text": "x"}]}]}, "messages"),
    ({"n": 0}, "n"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"max_tokens": -1}, "max_tokens"),
    ({"max_completion_tokens": 0}, "max_completion_tokens"),
    ({"temperature": -0.1}, "temperature"),
    ({"top_p": 0}, "top_p"),
    ({"top_p": 1.01}, "top_p"),
    ({"stop": 3}, "stop"),
    ({"stop": [""]}, "stop"),
    ({"stream": "sometimes"}, "stream"),
    ({"stream_options": {"include_usage": "maybe"}}, "stream_options"),
    ({"min_tokens": -1}, "min_tokens"),
])
def test_invalid_chat_request_names_the_field(fields, param):
    body = {"model": "m", "messages": [USER], **fields}
    body = {k: v for k, v in body.items() if v is not None}
    with pytest.raises(ValidationError) as info:
        ChatCompletionRequest.model_validate(body)
    err = validation_error_body(info.value)["error"]
    assert err["param"] == param
    assert err["type"] == "invalid_request_error" and err["code"] == 400
    assert param in err["message"]


def test_missing_messages_is_an_error():
    with pytest.raises(ValidationError, match="messages"):
        ChatCompletionRequest.model_validate({"model": "m"})


@pytest.mark.parametrize("prompt, prompts", [
    ("Hi", ["Hi"]),
    (["a", "b"], ["a", "b"]),
    ([1, 2, 3], [[1, 2, 3]]),
    ([[1], [2, 3]], [[1], [2, 3]]),
])
def test_completion_prompt_forms(prompt, prompts):
    assert completion(prompt=prompt).prompts == prompts


def test_completion_defaults_and_extras():
    req = completion(suffix="ignored", best_of=3)
    assert req.max_new_tokens == 16
    assert req.echo is False and req.logprobs is None
    assert completion(echo=True, logprobs=2).logprobs == 2


@pytest.mark.parametrize("fields, param", [
    ({"prompt": ""}, "prompt"),
    ({"prompt": []}, "prompt"),
    ({"prompt": [[]]}, "prompt"),
    ({"prompt": ["a", ""]}, "prompt"),
    ({"prompt": [1, -2]}, "prompt"),
    ({"prompt": [1, "a"]}, "prompt"),
    ({"prompt": 5}, "prompt"),
    ({"n": 0}, "n"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"temperature": -1}, "temperature"),
    ({"top_p": 2}, "top_p"),
    ({"logprobs": -1}, "logprobs"),
    ({"echo": "loud"}, "echo"),
])
def test_invalid_completion_request_names_the_field(fields, param):
    with pytest.raises(ValidationError) as info:
        completion(**fields)
    assert validation_error_body(info.value)["error"]["param"] == param


def test_missing_prompt_is_an_error():
    with pytest.raises(ValidationError, match="prompt"):
        CompletionRequest.model_validate({"model": "m"})


def test_non_object_body_is_an_error():
    with pytest.raises(ValidationError) as info:
        CompletionRequest.model_validate([1, 2])
    err = validation_error_body(info.value)["error"]
    assert err["param"] is None and err["message"].startswith("body:")


def test_error_body_shape():
    body = error_body("model 'x' not found", type="NotFoundError", param="model", code=404)
    assert body == {"error": {"message": "model 'x' not found", "type": "NotFoundError",
                              "param": "model", "code": 404}}
    assert error_body("bad")["error"] == {"message": "bad", "type": "invalid_request_error",
                                          "param": None, "code": 400}
    assert ErrorResponse.model_validate(body).error.code == 404


def test_usage_of_fills_total():
    assert UsageInfo.of(3, 4) == UsageInfo(prompt_tokens=3, completion_tokens=4, total_tokens=7)


def test_chat_response_is_accepted_by_the_sdk():
    resp = ChatCompletionResponse(
        id="c1", model="m", usage=UsageInfo.of(3, 2),
        choices=[ChatCompletionResponseChoice(
            index=0, message=ChatMessage(content="hé", reasoning_content="think"),
            finish_reason="stop", matched_stop=2)])
    sdk = ChatCompletion.model_validate(json.loads(resp.model_dump_json()))
    assert sdk.object == "chat.completion"
    assert sdk.choices[0].message.content == "hé"
    assert sdk.choices[0].message.reasoning_content == "think"
    assert sdk.usage.total_tokens == 5


def test_completion_response_and_chunk_are_accepted_by_the_sdk():
    resp = CompletionResponse(
        id="c2", model="m", usage=UsageInfo.of(1, 1),
        choices=[CompletionResponseChoice(index=0, text="x", finish_reason="length")])
    assert Completion.model_validate(json.loads(resp.model_dump_json())).choices[0].text == "x"
    # The SDK's Completion type wants a finish_reason: only a finish chunk validates strictly.
    chunk = CompletionStreamResponse(id="c2", model="m", choices=[
        CompletionResponseStreamChoice(index=1, text="y", finish_reason="stop", matched_stop=3)])
    sdk = Completion.model_validate(json.loads(chunk.model_dump_json()))
    assert (sdk.choices[0].index, sdk.choices[0].text) == (1, "y")


def test_model_list_is_accepted_by_the_sdk():
    models = ModelList(data=[ModelCard(id="m", root="m", max_model_len=4096)])
    dumped = json.loads(models.model_dump_json())
    assert dumped["object"] == "list"
    assert Model.model_validate(dumped["data"][0]).id == "m"
