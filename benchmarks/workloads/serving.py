"""HTTP-process workloads: H1 wake-ups, H2 SSE chunks, H3 queued outputs, H6 stream deltas.

All drive the real tokenizer manager (transport-free: requests go to a list, engine steps come
in as ``BatchStrOutput`` through ``handle_batch``) and the real serving classes, on a private
event loop owned by the workload.
"""

from __future__ import annotations

import asyncio
import random

from benchmarks.common import SEED, history_safe
from benchmarks.workloads.args import create_form

_PIECES = (" the", " token", " stream", " server", " batch", " café", " naïve", " Zürich",
           " 日本語", " 数据", " Привет", " Ελλάδα", " 🙂", " 🚀", " →", ",", ".", "")
_PROMPT = "Write a long story about a server that streams tokens to many clients."
H2_CHUNKS = ("first", "content", "finish")


def token_texts(num_tokens: int, seed: int = SEED) -> list[str]:
    """Seeded text of each output token (multi-byte, some empty as when a character is held back)."""
    rng = random.Random(seed)
    return [rng.choice(_PIECES) for _ in range(num_tokens)]


def _batch(rids: list[str], text: str, token_id: int, finish, completion_tokens: int):
    from reference_impl.messages import BatchStrOutput

    n = len(rids)
    return BatchStrOutput(rids=rids, texts=[text] * n, new_token_ids=[[token_id]] * n,
                          finish_reasons=[finish] * n, prompt_tokens=[16] * n,
                          completion_tokens=[completion_tokens] * n)


def _request(endpoint: str, args, num_tokens: int):
    from reference_impl.server.protocol import ChatCompletionRequest, CompletionRequest

    if endpoint == "chat":
        return ChatCompletionRequest(model=args.served_model_name, stream=True, max_tokens=num_tokens,
                                     messages=[{"role": "user", "content": _PROMPT}])
    return CompletionRequest(model=args.served_model_name, stream=True, max_tokens=num_tokens,
                             prompt=_PROMPT, echo=endpoint == "completions-echo")


def _serving(endpoint: str, args):
    """(tokenizer manager, chat or completions serving) wired as in the HTTP process."""
    from reference_impl.server.metrics import ServerMetrics
    from reference_impl.server.serving_chat import ServingChat
    from reference_impl.server.serving_completions import ServingCompletions
    from reference_impl.server.tokenizer_manager import TokenizerManager
    from reference_impl.tokenizer import get_tokenizer

    tm = TokenizerManager(args, lambda msg: None)
    cls = ServingChat if endpoint == "chat" else ServingCompletions
    return tm, cls(args, tm, get_tokenizer(None), ServerMetrics())


class OneRequestStream:
    """One streamed request of ``num_tokens`` output tokens, from engine steps to SSE bytes or outputs.

    ``endpoint`` "chat", "completions" or "completions-echo" runs the serving layer (every SSE
    chunk); "tokenizer-manager" stops at the outputs ``TokenizerManager.generate`` yields (H3).
    The consumer runs once every ``steps_per_wakeup`` engine steps, as when the event loop is busy.
    ``run()`` streams the whole request and returns the bytes (or outputs) it produced.
    """

    RID = "bench-0"

    def __init__(self, args, endpoint: str, num_tokens: int, steps_per_wakeup: int = 1,
                 seed: int = SEED):
        with history_safe():
            from reference_impl.messages import FinishReason

            self.args, self.endpoint = args, endpoint
            self.tm, self.serving = _serving("chat" if endpoint == "tokenizer-manager" else endpoint, args)
            self.request = _request("chat" if endpoint == "tokenizer-manager" else endpoint, args, num_tokens)
            texts = token_texts(num_tokens, seed)
            last = num_tokens - 1
            self.batches = [_batch([self.RID], t, 32 + k % 200, FinishReason("length") if k == last else None,
                                   k + 1) for k, t in enumerate(texts)]
            self.steps_per_wakeup = max(1, steps_per_wakeup)
            self.loop = asyncio.new_event_loop()

    def run(self) -> int:
        """Stream the request; the number of bytes (or outputs) the consumer received."""
        return self.loop.run_until_complete(self._stream())

    def close(self) -> None:
        self.loop.close()

    async def _stream(self) -> int:
        subs = self.serving.prepare(self.request)
        subs.reqs[0].rid = self.RID
        consumer = asyncio.ensure_future(self._consume(subs))
        await asyncio.sleep(0)
        handle, every = self.tm.handle_batch, self.steps_per_wakeup
        for k, batch in enumerate(self.batches, 1):
            await handle(batch)
            if k % every == 0:
                await asyncio.sleep(0)
        return await consumer

    async def _consume(self, subs) -> int:
        total = 0
        if self.endpoint == "tokenizer-manager":
            async for _, out in self.tm.generate(subs.reqs, subs.indices):
                total += len(out.output_ids)
            return total
        async for chunk in self.serving.stream(self.request, subs):
            total += len(chunk)
        return total


class ChunkEncoding:
    """H2: encode one chat chunk of the given kind ("first", "content", "finish")."""

    def __init__(self, args, kind: str, seed: int = SEED):
        self.encode = create_form("H2", args.sse_encoder).encode
        head = {"chunk_id": "chatcmpl-" + "0" * 32, "created": 1_700_000_000,
                "model": args.served_model_name, "index": 0}
        text = "".join(token_texts(4, seed))
        self.kwargs = {
            "first": {**head, "role": "assistant", "content": ""},
            "content": {**head, "content": text},
            "finish": {**head, "finish_reason": "stop", "matched_stop": 2},
        }[kind]

    def run(self) -> bytes:
        return self.encode(**self.kwargs)


class WakeupStep:
    """H1: one engine step's batch handed to ``num_consumers`` chat streams waiting on it.

    Streams run the real chat serving layer in incremental mode (so every step costs the same);
    ``run()`` delivers one batch and returns once every stream has produced its SSE chunk.
    """

    def __init__(self, args, num_consumers: int):
        with history_safe():
            self.tm, self.serving = _serving("chat", args)
            self.request = _request("chat", args, 100_000)
            self.loop = asyncio.new_event_loop()
            self.num_consumers = num_consumers
            self.rids = [f"bench-{i}" for i in range(num_consumers)]
            self.batch = _batch(self.rids, " token", 42, None, 1)
            self._num_chunks, self._target = 0, 2 * num_consumers  # role chunk + content chunk
            self._done = asyncio.Event()
            self._tasks = [self.loop.create_task(self._consume(rid)) for rid in self.rids]
            self.loop.run_until_complete(self._warm_up())

    async def _warm_up(self) -> None:
        await asyncio.sleep(0)
        await self._step()
        self._target = self.num_consumers

    async def _consume(self, rid: str) -> None:
        subs = self.serving.prepare(self.request)
        subs.reqs[0].rid = rid
        async for _ in self.serving.stream(self.request, subs):
            self._num_chunks += 1
            if self._num_chunks >= self._target:
                self._done.set()

    async def _step(self) -> None:
        self._num_chunks = 0
        self._done.clear()
        await self.tm.handle_batch(self.batch)
        await asyncio.wait_for(self._done.wait(), 60)

    def run(self) -> None:
        self.loop.run_until_complete(self._step())

    def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        self.loop.run_until_complete(asyncio.gather(*self._tasks, return_exceptions=True))
        self.loop.close()
