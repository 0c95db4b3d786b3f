"""The measured cases: each drives one upstream sglang function that a hot path changed.

Runs inside the child process (`benchmarks.upstream.child`), with one release's source tree
first on `sys.path` and the stubs installed. The workloads are the reference benchmarks' own
(`benchmarks.workloads`: token texts, chunk kinds, sizes), so each row stands beside its
reference row. Where a release lacks the function that a later one added, the adapter here
runs the code it replaced, written with that release's own classes (named in each docstring).
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import random
import types
from array import array

from benchmarks.common import SEED, best_time, set_single_thread
from benchmarks.workloads.serving import _PROMPT, H2_CHUNKS, token_texts

H3_TOKENS = (1_000, 4_000)
H3_STEPS_PER_WAKEUP = 16
H6_TOKENS = (1_000, 4_000)
H4_PROMPT_LEN, H4_OUTPUT_LEN = 10_000, 1_000
MODEL = "bench-model"


@dataclasses.dataclass(frozen=True)
class Row:
    """One figure of one release: ``case`` (e.g. "h2-content-chunk") and its value in ``unit``."""

    hot_path: str
    case: str
    value: float
    unit: str
    function: str


def _server_args(**overrides):
    """Upstream's `ServerArgs` defaults as plain attributes (its `__post_init__` wants a model)."""
    from sglang.srt.server_args import ServerArgs

    values = {f.name: f.default for f in dataclasses.fields(ServerArgs)
              if f.default is not dataclasses.MISSING}
    values.update({f.name: f.default_factory() for f in dataclasses.fields(ServerArgs)
                   if f.default_factory is not dataclasses.MISSING})
    values.update(overrides)
    return types.SimpleNamespace(**values)


def _dataclass(cls, **given):
    """An instance of upstream dataclass ``cls``: ``given`` fields, None for other required ones."""
    required = {f.name: None for f in dataclasses.fields(cls) if f.init
                and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
    return cls(**{**required, **given})


# -- H2: one chat chunk ------------------------------------------------------------------------

def _chunk_kwargs(kind: str) -> dict:
    head = {"chunk_id": "chatcmpl-" + "0" * 32, "created": 1_700_000_000, "model": MODEL, "index": 0}
    return {"first": {**head, "role": "assistant", "content": ""},
            "content": {**head, "content": "".join(token_texts(4, SEED))},
            "finish": {**head, "finish_reason": "stop", "matched_stop": 2}}[kind]


def _pydantic_chunk(chunk_id, created, model, index, role=None, content=None,
                    finish_reason=None, matched_stop=None) -> str:
    """The chunk as releases before `_fast_sse_content` build it inline in `_generate_chat_stream`."""
    from sglang.srt.entrypoints.openai.protocol import (
        ChatCompletionResponseStreamChoice,
        ChatCompletionStreamResponse,
        DeltaMessage,
    )

    choice = ChatCompletionResponseStreamChoice(
        index=index, delta=DeltaMessage(role=role, content=content),
        finish_reason=finish_reason, matched_stop=matched_stop, logprobs=None)
    chunk = ChatCompletionStreamResponse(id=chunk_id, created=created, choices=[choice], model=model)
    return f"data: {chunk.model_dump_json()}\n\n"


def chunk_encoder():
    """(upstream's chunk encoder of this release, its name)."""
    from sglang.srt.entrypoints.openai import serving_chat

    fast = getattr(serving_chat, "_fast_sse_content", None)
    if fast is not None:
        return fast, "serving_chat._fast_sse_content"
    return _pydantic_chunk, "protocol.ChatCompletionStreamResponse.model_dump_json"


def h2_rows() -> list[Row]:
    """H2: µs per encoded chunk, first / content / finish (reference: bench_sse.TimeChatChunk)."""
    encode, name = chunk_encoder()
    rows = []
    for kind in H2_CHUNKS:
        kwargs = _chunk_kwargs(kind)
        seconds = best_time(lambda kw=kwargs: encode(**kw))
        rows.append(Row("H2", f"h2-{kind}-chunk", seconds * 1e6, "us", name))
    return rows


# -- H6 (+H2): every chunk of one streamed chat request ----------------------------------------

class _FakeTokenizerManager:
    """What `_generate_chat_stream` asks of the tokenizer manager: server args and outputs."""

    def __init__(self, outputs: list[dict]):
        self.server_args = _server_args()
        self.outputs = outputs

    async def generate_request(self, adapted_request, raw_request):
        for out in self.outputs:
            yield out


def _chat_outputs(num_tokens: int) -> list[dict]:
    """Cumulative-mode outputs (upstream's default): each holds the whole text so far."""
    outputs, text = [], ""
    for k, piece in enumerate(token_texts(num_tokens, SEED)):
        text += piece
        finish = {"type": "length", "length": num_tokens} if k == num_tokens - 1 else None
        outputs.append({"text": text, "index": 0, "meta_info": {
            "id": "chatcmpl-bench", "finish_reason": finish, "prompt_tokens": 16,
            "completion_tokens": k + 1, "cached_tokens": 0}})
    return outputs


def chat_stream(num_tokens: int):
    """A callable streaming one chat request of ``num_tokens`` through `_generate_chat_stream`."""
    from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest
    from sglang.srt.entrypoints.openai.serving_chat import OpenAIServingChat

    serving = object.__new__(OpenAIServingChat)
    serving.tokenizer_manager = _FakeTokenizerManager(_chat_outputs(num_tokens))
    serving.reasoning_parser = serving.tool_call_parser = None
    request = ChatCompletionRequest(model=MODEL, stream=True, max_tokens=num_tokens,
                                    messages=[{"role": "user", "content": _PROMPT}])
    loop = asyncio.new_event_loop()

    async def stream() -> int:
        total = 0
        async for chunk in serving._generate_chat_stream(None, request, None):
            total += len(chunk)
        return total

    return lambda: loop.run_until_complete(stream())


def h6_rows() -> list[Row]:
    """H6 with H2: ms per request of 1K / 4K tokens, every SSE chunk (reference: bench_stream_deltas)."""
    rows = []
    for num_tokens in H6_TOKENS:
        seconds = best_time(chat_stream(num_tokens), repeat=3, min_time=0.2)
        rows.append(Row("H6", f"h6-chat-{num_tokens // 1000}k", seconds * 1e3, "ms",
                        "OpenAIServingChat._generate_chat_stream"))
    return rows


# -- H3: one request's outputs through the tokenizer manager's batch handler --------------------

def _tokenizer_manager():
    from sglang.srt.managers.tokenizer_manager import TokenizerManager

    tm = object.__new__(TokenizerManager)
    tm.server_args = _server_args(stream_output=False, incremental_streaming_output=False)
    tm.rid_to_state = {}
    tm.enable_metrics = tm.collect_metrics = False
    tm.dump_requests_folder = tm.crash_dump_folder = ""
    tm.log_requests = False
    return tm


def _req_state(tm, rid: str):
    from sglang.srt.managers import tokenizer_manager as module
    from sglang.srt.managers.io_struct import GenerateReqInput

    obj = GenerateReqInput(text=_PROMPT, stream=True, rid=rid)
    stats = module.APIServerReqTimeStats() if hasattr(module, "APIServerReqTimeStats") else None
    fields = {f.name for f in dataclasses.fields(module.ReqState)}
    given = {"out_list": [], "finished": False, "event": asyncio.Event(), "obj": obj}
    if "time_stats" in fields:
        given["time_stats"] = stats
    state = _dataclass(module.ReqState, **given)
    tm.rid_to_state[rid] = state
    return state


def _str_batches(rid: str, num_tokens: int) -> list:
    from sglang.srt.managers.io_struct import BatchStrOutput

    texts = token_texts(num_tokens, SEED)
    last = num_tokens - 1
    per_req = {"rids": [rid], "http_worker_ipcs": [None]}
    return [_dataclass(BatchStrOutput, **per_req, finished_reasons=[
        {"type": "length", "length": num_tokens} if k == last else None],
        output_strs=[t], output_ids=[[32 + k % 200]], prompt_tokens=[16], reasoning_tokens=[0],
        completion_tokens=[k + 1], cached_tokens=[0], retraction_counts=[0])
        for k, t in enumerate(texts)]


def tokenizer_manager_request(num_tokens: int, steps_per_wakeup: int = H3_STEPS_PER_WAKEUP):
    """A callable: every output of one non-incremental streaming request through
    `TokenizerManager._handle_batch_output`, the consumer keeping the newest output every
    ``steps_per_wakeup`` steps and filling in its text as `_wait_one_response` does."""
    tm = _tokenizer_manager()
    batches = _str_batches("bench-0", num_tokens)
    handle = tm._handle_batch_output
    loop = asyncio.new_event_loop()
    is_async = inspect.iscoroutinefunction(handle)

    async def request() -> int:
        state = _req_state(tm, "bench-0")
        total = 0
        for k, batch in enumerate(batches, 1):
            if is_async:
                await handle(batch)
            else:
                handle(batch)
            if k % steps_per_wakeup == 0 or k == len(batches):
                out = state.out_list[-1]
                state.out_list = []
                if out.get("text") is None:
                    out["text"] = state.get_text()
                total += len(out["output_ids"])
        return total

    return lambda: loop.run_until_complete(request())


def h3_rows() -> list[Row]:
    """H3: ms per request of 1K / 4K tokens (reference: bench_stream_outputs.TimeStreamOutputs)."""
    rows = []
    for num_tokens in H3_TOKENS:
        seconds = best_time(tokenizer_manager_request(num_tokens), repeat=3, min_time=0.2)
        rows.append(Row("H3", f"h3-request-{num_tokens // 1000}k", seconds * 1e3, "ms",
                        "TokenizerManager._handle_batch_output"))
    return rows


# -- H4: the fill ids of one scheduled request ------------------------------------------------

def scheduled_req(prompt_len: int = H4_PROMPT_LEN, output_len: int = H4_OUTPUT_LEN):
    """Upstream's `Req` holding ``prompt_len`` prompt ids and ``output_len`` output ids, in the
    container its constructor declares (list before sglang#25098, `array('q')` after)."""
    from sglang.srt.managers.schedule_batch import Req
    from sglang.srt.sampling.sampling_params import SamplingParams

    rng = random.Random(SEED)
    ids = [rng.randrange(32, 50_000) for _ in range(prompt_len)]
    annotation = str(inspect.signature(Req.__init__).parameters["origin_input_ids"].annotation)
    prompt = array("q", ids) if "array" in annotation else ids
    req = Req("bench-0", _PROMPT, prompt, SamplingParams(max_new_tokens=output_len))
    req.output_ids.extend(rng.randrange(32, 50_000) for _ in range(output_len))
    return req


def h4_rows() -> list[Row]:
    """H4: µs per `Req.init_next_round_input` with 10K prompt + 1K output ids (no prefix cache):
    the fill-ids rebuild (reference: bench_token_storage fill_rebuild, 10K)."""
    set_single_thread()
    req = scheduled_req()
    seconds = best_time(req.init_next_round_input)
    return [Row("H4", "h4-fill-rebuild-10k", seconds * 1e6, "us", "Req.init_next_round_input")]


CASES = {"H2": h2_rows, "H3": h3_rows, "H4": h4_rows, "H6": h6_rows}
"""Hot path -> the function measuring it in the current release."""
