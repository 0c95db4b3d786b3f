"""The tokenizer manager: one state per request, the receive loop, and the waiting streams.

Receive loop: a ``BatchStrOutput`` per engine step → each request's output is queued on its
state (H3 decides what is queued) → the waiting coroutines are woken (H1 decides how). A stream
whose consumer is away (its client not reading) while its queue passes
``--max-queued-output-bytes`` is ended as if its client had gone.
Transport-free: it sends through a callable and is fed batches by ``handle_batch``, so tests
and benchmarks run the real handler in-process.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import AsyncIterator, Callable

from reference_impl.config import ServerArgs
from reference_impl.hot_paths import HOT_PATHS
from reference_impl.messages import (
    AbortReq,
    BatchStrOutput,
    GetStatsReq,
    ReqTiming,
    SchedulerStats,
    TokenizedGenerateReq,
)
from reference_impl.server.stream_outputs import ReqOutput, ReqState, queued_bytes

logger = logging.getLogger(__name__)
_STATS_TIMEOUT_S = 10.0


class ClientGone:
    """Set once, when a request's client disconnects; the request's streams stop at once.

    Setting it aborts the request's unfinished sub-requests and wakes their waiting streams,
    which check ``is_set`` on every wake-up (O(1)) and leave: a busy stream whose event is
    always set again before it suspends never needs a cancellation to land.
    """

    __slots__ = ("is_set", "_on_set")

    def __init__(self) -> None:
        self.is_set = False
        self._on_set: list[Callable[[], None]] = []

    def set(self) -> None:
        if self.is_set:
            return
        self.is_set = True
        for callback in self._on_set:
            callback()

    def on_set(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` when the client goes (now, if it has already gone)."""
        self._on_set.append(callback)
        if self.is_set:
            callback()


class TokenizerManager:
    """Tracks every live request of the HTTP process and streams its outputs."""

    def __init__(self, args: ServerArgs, send: Callable[[object], None], metrics=None):
        self.args = args
        self._send = send
        self._metrics = metrics
        self._outputs = HOT_PATHS["H3"].create(args.stream_output,
                                               incremental=args.incremental_streaming_output)
        self._wakeups = HOT_PATHS["H1"].create(args.wakeup, args.batch_notify_size)
        self.rid_to_state: dict[str, ReqState] = {}
        self._stats_waiters: dict[int, asyncio.Future] = {}
        self._stats_ids = itertools.count(1)

    # Receive side

    async def handle_batch(self, batch: BatchStrOutput) -> None:
        """Queue each request's output and wake its consumer."""
        await self._wakeups.deliver(batch, self._process_one)

    def handle_stats(self, stats: SchedulerStats) -> None:
        waiter = self._stats_waiters.pop(stats.request_id, None)
        if waiter is not None and not waiter.done():
            waiter.set_result(stats)

    def _process_one(self, batch: BatchStrOutput, i: int) -> ReqState | None:
        state = self.rid_to_state.get(batch.rids[i])
        if state is None:
            return None
        text, ids, finish = batch.texts[i], batch.new_token_ids[i], batch.finish_reasons[i]
        state.text_chunks.append(text)
        state.output_ids.extend(ids)
        out = self._outputs.build(state, text, ids, finish, batch.prompt_tokens[i],
                                  batch.completion_tokens[i])
        state.out_list.append(out)
        state.num_queued_bytes += queued_bytes(state, out)
        if self._metrics is not None:
            self._metrics.on_output(state, len(ids), time.perf_counter())
        if finish is not None:
            state.finished = True
            if batch.timings is not None:
                state.timing = batch.timings.get(state.rid)
            del self.rid_to_state[state.rid]
        elif state.num_queued_bytes > self.args.max_queued_output_bytes and not state.is_waiting:
            # NOTE: only a consumer away from its queue (writing to a client that does not read)
            # is cut; one waiting for a turn of a busy event loop is the server's doing.
            self._cut_off(state)
        return state

    def _cut_off(self, state: ReqState) -> None:
        """End a request whose consumer stopped taking its outputs (its client is not reading)."""
        logger.info("a stream left %d bytes of outputs untaken (--max-queued-output-bytes): its "
                    "client is not reading; request aborted", state.num_queued_bytes)
        state.out_list, state.num_queued_bytes = [], 0
        state.gone.set()

    # Request side

    async def generate(self, reqs: list[TokenizedGenerateReq], indices: list[int],
                       gone: ClientGone | None = None,
                       timings: dict[int, tuple[float, ReqTiming]] | None = None
                       ) -> AsyncIterator[tuple[int, ReqOutput]]:
        """Send the sub-requests and yield ``(index, output)`` until each has finished.

        Leaving early (client gone, cancelled, an error) aborts every sub-request still running;
        no exception leaves a state behind in ``rid_to_state``. ``timings``, when given, gets
        each finished sub-request's send time and ``ReqTiming`` by index before the iteration ends.
        """
        states = self._register_and_send(reqs, indices)
        gone = gone if gone is not None else ClientGone()
        for state in states:
            state.gone = gone
        gone.on_set(lambda: self._stop(states))
        try:
            if len(states) == 1:
                async for out in self._wait_one(states[0], gone):
                    yield states[0].index, out
            else:
                async for item in self._wait_many(states, gone):
                    yield item
        finally:
            self._stop(states)
            if timings is not None:
                timings.update((s.index, (s.created, s.timing)) for s in states
                               if s.timing is not None)

    def abort(self, rid: str) -> None:
        """Forget a request and tell the scheduler to free it."""
        if self.rid_to_state.pop(rid, None) is not None:
            self._send(AbortReq(rid))

    def _stop(self, states: list[ReqState]) -> None:
        """Abort the unfinished states and wake their streams (they check why they woke)."""
        for state in states:
            if not state.finished:
                self.abort(state.rid)
                state.event.set()

    async def get_scheduler_stats(self, timeout: float = _STATS_TIMEOUT_S) -> SchedulerStats:
        """The scheduler's stats, or ``TimeoutError`` when it does not answer in ``timeout`` s."""
        request_id = next(self._stats_ids)
        waiter = asyncio.get_running_loop().create_future()
        self._stats_waiters[request_id] = waiter
        self._send(GetStatsReq(request_id))
        try:
            return await asyncio.wait_for(waiter, timeout)
        finally:
            self._stats_waiters.pop(request_id, None)

    def _register_and_send(self, reqs: list[TokenizedGenerateReq], indices: list[int]
                           ) -> list[ReqState]:
        states = []
        try:
            for req, index in zip(reqs, indices, strict=True):
                state = ReqState(req.rid, index, asyncio.Event(), time.perf_counter())
                self.rid_to_state[req.rid] = state
                states.append(state)
                self._send(req)
        except BaseException:
            for state in states:
                self.abort(state.rid)
            raise
        return states

    async def _wait_one(self, state: ReqState, gone: ClientGone) -> AsyncIterator[ReqOutput]:
        take = self._outputs.take
        while True:
            state.is_waiting = True
            await state.event.wait()
            state.is_waiting = False
            state.event.clear()
            if gone.is_set:
                raise ConnectionAbortedError("client disconnected")
            outs, state.out_list, state.num_queued_bytes = state.out_list, [], 0
            if not outs:
                continue
            out = take(state, outs)
            yield out
            if out.finish_reason is not None:
                return

    async def _wait_many(self, states: list[ReqState], gone: ClientGone
                         ) -> AsyncIterator[tuple[int, ReqOutput]]:
        # NOTE: bounded, so a pump whose merged stream is not taken leaves its outputs queued in
        # its state, where --max-queued-output-bytes counts them.
        queue: asyncio.Queue = asyncio.Queue(maxsize=len(states))

        async def pump(state: ReqState) -> None:
            try:
                async for out in self._wait_one(state, gone):
                    await queue.put((state.index, out))
            except asyncio.CancelledError:
                raise
            except BaseException as exc:  # surfaced to the merged stream
                await queue.put(exc)

        tasks = [asyncio.create_task(pump(s)) for s in states]
        try:
            num_open = len(states)
            while num_open:
                item = await queue.get()
                if isinstance(item, BaseException):
                    raise item
                yield item
                if item[1].finish_reason is not None:
                    num_open -= 1
        finally:
            for task in tasks:
                task.cancel()
