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
from collections.abc import Callable

from benchmarks.common import SEED, best_time, set_single_thread
from benchmarks.upstream import delayer
from benchmarks.workloads.serving import _PROMPT, H2_CHUNKS, token_texts

H3_TOKENS = (1_000, 4_000)
H3_STEPS_PER_WAKEUP = 16
H6_TOKENS = (1_000, 4_000)
H4_PROMPT_LEN, H4_OUTPUT_LEN = 10_000, 1_000
H1_STREAMS = (256, 2048)
MODEL = "bench-model"


@dataclasses.dataclass(frozen=True)
class Row:
    """One figure of one release: ``case`` (e.g. "h2-content-chunk") and its value in ``unit``."""

    hot_path: str
    case: str
    value: float
    unit: str
    function: str


@dataclasses.dataclass(frozen=True)
class Case:
    """One measured case: ``build()`` returns the callable that one call of the case is.

    A timed case (``scale``: seconds to ``unit``) is timed with `best_time` by the harness and
    by asv, and counted by callgrind; a ``scale`` of None means the callable returns the figure
    itself (a count of loop turns).
    """

    name: str
    hot_path: str
    unit: str
    scale: float | None
    function: str
    build: Callable[[], Callable[[], object]]


def _event_loop() -> asyncio.AbstractEventLoop:
    # NOTE: importing sglang installs uvloop's policy; the reference workloads run asyncio's own
    # loop, and counting loop turns needs it, so every case uses asyncio's loop explicitly.
    return asyncio.SelectorEventLoop()


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
    """(upstream's chunk encoder of this release, its name): `_fast_sse_content` in
    serving_chat (0.5.11-0.5.12.post1), `build_sse_content` in sse_utils (0.5.13 on), else the
    pydantic chunk of the releases before."""
    import importlib

    for module, name in (("serving_chat", "_fast_sse_content"), ("sse_utils", "build_sse_content")):
        try:
            found = importlib.import_module(f"sglang.srt.entrypoints.openai.{module}")
        except ModuleNotFoundError:
            continue
        if hasattr(found, name):
            return getattr(found, name), f"{module}.{name}"
    return _pydantic_chunk, "protocol.ChatCompletionStreamResponse.model_dump_json"


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
    loop = _event_loop()

    async def stream() -> int:
        total = 0
        async for chunk in serving._generate_chat_stream(None, request, None):
            total += len(chunk)
        return total

    return lambda: loop.run_until_complete(stream())


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
    loop = _event_loop()
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


# -- H1: one engine step handed to many waiting streams --------------------------------------

def count_loop_turns(loop) -> list[int]:
    """Count ``loop``'s iterations (one per `_run_once`): the event-loop switches of a step."""
    turns = [0]
    run_once = loop._run_once

    def counted():
        turns[0] += 1
        run_once()

    loop._run_once = counted
    return turns


class WakeupStep:
    """One engine step's `BatchStrOutput` to ``num_streams`` waiter tasks, each waiting on its
    `ReqState.event` as `_wait_one_response` does (drain the queue), incremental output, through
    `TokenizerManager._handle_batch_output` (sync in 0.5.10.post1, a coroutine with
    `batch_notify_size` = 16 after). ``run()`` returns once every waiter has woken."""

    def __init__(self, num_streams: int):
        self.tm = _tokenizer_manager()
        # NOTE: incremental output, as the reference H1 workload: every step costs the same, and
        # no per-step copy (H3) grows with the number of steps the timing runs.
        self.tm.server_args.batch_notify_size = 16
        self.tm.server_args.incremental_streaming_output = True
        self.loop = _event_loop()
        rids = [f"bench-{i}" for i in range(num_streams)]
        self.states = [self.loop.run_until_complete(self._state(rid)) for rid in rids]
        one = _str_batches("x", 2)[0]
        self.batch = dataclasses.replace(one, rids=rids, **{
            f.name: getattr(one, f.name) * num_streams for f in dataclasses.fields(one)
            if f.name != "rids" and isinstance(getattr(one, f.name), list)
            and len(getattr(one, f.name)) == 1})
        self.wakeups, self.target, self.done = 0, num_streams, asyncio.Event()
        self.tasks = [self.loop.create_task(self._wait(s)) for s in self.states]
        self.turns = count_loop_turns(self.loop)
        self.run()

    async def _state(self, rid):
        return _req_state(self.tm, rid)

    async def _wait(self, state) -> None:
        while True:
            await state.event.wait()
            state.event.clear()
            out = state.out_list[-1]
            state.out_list = []
            if out.get("text") is None:
                out["text"] = state.get_text()
            self.wakeups += 1
            if self.wakeups == self.target:
                self.done.set()

    async def _step(self) -> None:
        self.wakeups = 0
        self.done.clear()
        result = self.tm._handle_batch_output(self.batch)
        if inspect.isawaitable(result):
            await result
        await self.done.wait()

    def run(self) -> None:
        self.loop.run_until_complete(self._step())

    def loop_turns(self) -> int:
        """Event-loop iterations of one step (deterministic for a given release)."""
        self.turns[0] = 0
        self.run()
        return self.turns[0]


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


def _h1_turns(num_streams: int):
    return WakeupStep(num_streams).loop_turns


def _h2_function() -> str:
    return chunk_encoder()[1]


def _h2_encode(kind: str):
    encode, kwargs = chunk_encoder()[0], _chunk_kwargs(kind)
    return lambda: encode(**kwargs)


def _h4_fill():
    set_single_thread()
    return scheduled_req().init_next_round_input


_WAITERS = "TokenizerManager._handle_batch_output (waiter tasks)"
_DELAYER = "PrefillDelayer._negotiate_should_allow_prefill (replay)"
CASES: tuple[Case, ...] = (
    *(c for n in H1_STREAMS for c in (
        Case(f"h1-step-{n}", "H1", "ms", 1e3, _WAITERS, lambda n=n: WakeupStep(n).run),
        Case(f"h1-loop-turns-{n}", "H1", "turns", None, _WAITERS, lambda n=n: _h1_turns(n)))),
    *(Case(f"h2-{kind}-chunk", "H2", "us", 1e6, "", lambda kind=kind: _h2_encode(kind))
      for kind in H2_CHUNKS),
    *(Case(f"h3-request-{n // 1000}k", "H3", "ms", 1e3, "TokenizerManager._handle_batch_output",
           lambda n=n: tokenizer_manager_request(n)) for n in H3_TOKENS),
    Case("h4-fill-rebuild-10k", "H4", "us", 1e6, "Req.init_next_round_input", _h4_fill),
    Case("h5-passes-allowed", "H5", "passes", None, _DELAYER, delayer.passes_allowed),
    Case("h5-decisions-differ", "H5", "passes", None, _DELAYER, delayer.decisions_differ),
    *(Case(f"h6-chat-{n // 1000}k", "H6", "ms", 1e3, "OpenAIServingChat._generate_chat_stream",
           lambda n=n: chat_stream(n)) for n in H6_TOKENS),
)
"""Every case, in hot-path order. H2's function name depends on the release (`chunk_encoder`)."""
HOT_PATHS = tuple(dict.fromkeys(c.hot_path for c in CASES))


def measure(case: Case) -> Row:
    """``case`` on the release first on `sys.path`: best of a few short rounds (or its count)."""
    fn = case.build()
    if case.scale is None:
        value = fn()
    else:
        repeat, min_time = (3, 0.2) if case.unit == "ms" else (5, 0.05)
        value = best_time(fn, repeat, min_time) * case.scale
    return Row(case.hot_path, case.name, value, case.unit, case.function or _h2_function())
