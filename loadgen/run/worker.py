"""A worker process: one uvloop, one httpx client, its share of the load, its own health figures.

The parent hands each worker its items (request bodies with intended start offsets for the rate
mode), a barrier to start together, shared counters for the live display and a stop event
(Ctrl-C). The worker sends back its per-request records and health through a pipe.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import re
import resource
import signal
import time
from dataclasses import dataclass, replace
from enum import IntEnum

import msgspec

from loadgen.measure.records import RequestRecord, WorkerHealth, WorkerResult
from loadgen.plan.config import RunConfig
from loadgen.plan.datasets import load_tokenizer
from loadgen.run.client import Client, RawResponse, finish_record, finish_with_answer, turn_body
from loadgen.run.clock import now_ns

TICK_S = 0.05
BARRIER_TIMEOUT_S = 600.0
MAX_RAW_BYTES = 256 << 20


class LiveCount(IntEnum):
    """Each worker's slots in the shared counter array the parent reads for the live display."""

    DONE = 0
    IN_FLIGHT = 1
    ERRORS = 2
    CHUNKS = 3
    TTFT_WRITTEN = 4  # live TTFTs written so far into the ring that follows the counters


#: Each worker's slots: the counters, then a ring of its latest live TTFTs (µs; only with `cfg.live`).
TTFT_RING = 256
NUM_COUNTERS = len(LiveCount) + TTFT_RING
#: The first non-empty content (chat) or text (completions) in a chunk of SSE bytes.
_FIRST_CONTENT = re.compile(rb'"(?:content|text)":"[^"]')


@dataclass(frozen=True)
class SessionPlan:
    """A multi-turn session's later turns: the user texts (the first is in the item's body), their
    lengths, the output length per turn, the think time, the first turn's request index, and the
    bound on the conversation a turn may carry (user turns and answers, UTF-8 bytes)."""

    user_turns: tuple[str, ...]
    user_lens: tuple[int, ...]
    output_lens: tuple[int, ...]
    think_time_s: float
    first_index: int
    max_context_bytes: int

    def input_len(self, turn: int) -> int:
        """Nominal input length of a turn: the user turns so far plus the output lengths asked."""
        return sum(self.user_lens[:turn + 1]) + sum(self.output_lens[:turn])


@dataclass(frozen=True)
class WorkItem:
    """One request to send: its global index, body, nominal lengths and intended offset; with
    `session`, the first turn of a multi-turn session (`index` is then the session's)."""

    index: int
    body: bytes
    input_len: int
    is_exact_input_len: bool
    output_len: int
    offset_s: float | None = None
    session: SessionPlan | None = None


@dataclass(frozen=True)
class WorkerPlan:
    """A worker's share of the run."""

    worker: int
    items: list[WorkItem]
    warmup: list[WorkItem]
    num_total: int
    tokenizer_path: str | None = None


class _Worker:
    def __init__(self, cfg: RunConfig, plan: WorkerPlan, counters, stop_event) -> None:
        self.cfg, self.plan = cfg, plan
        self.counters, self.stop_event = counters, stop_event
        self.base = plan.worker * NUM_COUNTERS
        self.limit = cfg.worker_concurrency(plan.worker)
        self.raws: list[RawResponse] = []
        self.records: list[RequestRecord] = []
        self.tasks: set[asyncio.Task] = set()
        self.lags_ms: list[float] = []
        self.raw_bytes = 0
        self.is_interrupted = False
        self.in_flight = 0
        self.full_at_s: float | None = None
        self.lag_at_s: list[float] = []

    async def run(self, barrier, start_ns) -> WorkerResult:
        num_conn = self.limit or max(64, len(self.plan.items))
        async with Client(self.cfg, num_conn) as client:
            self.client = client
            self.requests = {it.index: client.prepare(it.body, it.index) for it in self.plan.items}
            await self._warmup()
            await asyncio.get_running_loop().run_in_executor(None, barrier.wait, BARRIER_TIMEOUT_S)
            self.t0 = start_ns.value
            await asyncio.sleep(max(self.t0 - now_ns(), 0) / 1e9)
            cpu0, wall0, usage0 = time.process_time(), time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
            monitor = asyncio.create_task(self._monitor())
            self.dispatcher = asyncio.create_task(self._dispatch())
            try:
                await self.dispatcher
            except asyncio.CancelledError:
                pass
            await self._drain()
            monitor.cancel()
            usage = resource.getrusage(resource.RUSAGE_SELF)
            health = WorkerHealth(worker=self.plan.worker, cpu_s=time.process_time() - cpu0,
                                  wall_s=time.perf_counter() - wall0, loop_lag_ms=self.lags_ms,
                                  sys_cpu_s=usage.ru_stime - usage0.ru_stime,
                                  num_sleeps=usage.ru_nvcsw - usage0.ru_nvcsw, lag_at_s=self.lag_at_s,
                                  full_at_s=self.full_at_s, limit=self.limit or 0)
        tokenizer = load_tokenizer(self.plan.tokenizer_path)
        cpu1 = time.process_time()
        # NOTE: parsing makes no reference cycles; with the collector on, each of its passes
        # re-walks every kept record (parse 1.7 -> 1.5 µs per event in a 5 s flood run).
        gc.disable()
        try:
            self.records += [finish_record(raw, tokenizer) for raw in self.raws]
        finally:
            gc.enable()
        health.parse_cpu_s = time.process_time() - cpu1
        health.num_events = sum([len(r.chunk_ns) for r in self.records])
        return WorkerResult(records=self.records, health=health, interrupted=self.is_interrupted)

    async def _warmup(self) -> None:
        sem = asyncio.Semaphore(self.limit or len(self.plan.warmup) or 1)

        async def one(item: WorkItem) -> None:
            async with sem:
                await self.client.send(self.client.prepare(item.body), RawResponse(_new_record(item, 0)))

        await asyncio.gather(*(one(item) for item in self.plan.warmup))

    def _items(self):
        if self.cfg.duration_s is None or self.cfg.is_rate_mode:
            yield from self.plan.items
            return
        for rep in itertools.count():
            for item in self.plan.items:
                yield replace(item, index=rep * self.plan.num_total + item.index)

    async def _dispatch(self) -> None:
        sem = asyncio.Semaphore(self.limit) if self.limit else None
        t0 = self.t0
        deadline = t0 + int(self.cfg.duration_s * 1e9) if self.cfg.duration_s else None
        ramp_ns = int(self.cfg.ramp_up_s * 1e9)
        for started, item in enumerate(self._items()):
            if ramp_ns and self.limit and started < self.limit:
                # NOTE: --ramp-up opens the streams evenly over the ramp instead of all at once.
                await _sleep_until(t0 + ramp_ns * started // self.limit)
            intended = t0
            if item.offset_s is not None:
                intended = t0 + int(item.offset_s * 1e9)
                await _sleep_until(intended)
            if sem is not None:
                await sem.acquire()
                # NOTE: waiting for a concurrency slot is chosen queueing, not client lag.
                intended = max(intended, now_ns()) if item.offset_s is not None else now_ns()
            if self.is_interrupted or (deadline and now_ns() >= deadline):
                if sem is not None:
                    sem.release()
                break
            send = self._one if item.session is None else self._session
            task = asyncio.create_task(send(item, intended, sem))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    async def _one(self, item: WorkItem, intended_ns: int, sem) -> None:
        rec = _new_record(item, self.plan.worker)
        rec.intended_ns = intended_ns
        raw = RawResponse(rec, is_stream=self.cfg.stream)
        self.counters[self.base + LiveCount.IN_FLIGHT] += 1
        self.in_flight += 1
        if self.full_at_s is None and self.limit and self.in_flight >= self.limit:
            self.full_at_s = (now_ns() - self.t0) / 1e9
        try:
            await self.client.send(self.requests[item.index % self.plan.num_total], raw)
        finally:
            self.counters[self.base + LiveCount.IN_FLIGHT] -= 1
            self.in_flight -= 1
            if sem is not None:
                sem.release()
        self._keep(raw)

    async def _session(self, item: WorkItem, intended_ns: int, sem) -> None:
        """A multi-turn session, holding its concurrency slot for all its turns. Each turn's answer is
        parsed as soon as it ends (only in this mode), and the next turn sent `think_time_s` later
        with the conversation so far; a failed turn ends the session, and so does a turn whose
        conversation would pass `max_context_bytes` (a failed record, not sent: context_too_large)."""
        plan = item.session
        history: list[tuple[str, str]] = []
        end_ns = context_bytes = 0
        self.counters[self.base + LiveCount.IN_FLIGHT] += 1
        self.in_flight += 1
        if self.full_at_s is None and self.limit and self.in_flight >= self.limit:
            self.full_at_s = (now_ns() - self.t0) / 1e9
        try:
            for turn, user in enumerate(plan.user_turns):
                context_bytes += len(user.encode())
                if turn and context_bytes > plan.max_context_bytes:
                    self._refuse_turn(item, turn, context_bytes)
                    break
                if turn:
                    intended_ns = end_ns + int(plan.think_time_s * 1e9)
                    await _sleep_until(intended_ns)
                    body = turn_body(self.cfg, item.body, history, user, plan.output_lens[turn])
                    request = self.client.prepare(body, plan.first_index + turn)
                else:
                    request = self.requests[item.index]
                rec = RequestRecord(index=plan.first_index + turn, worker=self.plan.worker, intended_ns=intended_ns,
                                    start_ns=0, end_ns=0, input_len=plan.input_len(turn),
                                    is_exact_input_len=item.is_exact_input_len and turn == 0,
                                    output_len_asked=plan.output_lens[turn], session=item.index, turn=turn)
                raw = RawResponse(rec, is_stream=self.cfg.stream)
                await self.client.send(request, raw)
                self._count(raw)
                rec, answer = finish_with_answer(raw)
                self.records.append(rec)
                if answer is None:
                    break
                history.append((user, answer))
                context_bytes += len(answer.encode())
                end_ns = rec.end_ns
        finally:
            self.counters[self.base + LiveCount.IN_FLIGHT] -= 1
            self.in_flight -= 1
            if sem is not None:
                sem.release()

    def _refuse_turn(self, item: WorkItem, turn: int, context_bytes: int) -> None:
        """A failed record for a session's turn not sent: its conversation passed the bound."""
        plan, now = item.session, now_ns()
        rec = RequestRecord(index=plan.first_index + turn, worker=self.plan.worker, intended_ns=now, start_ns=now,
                            end_ns=now, input_len=plan.input_len(turn), output_len_asked=plan.output_lens[turn],
                            session=item.index, turn=turn, error_class="context_too_large",
                            error_message=f"turn not sent: the conversation would be {context_bytes} bytes, past "
                            f"--multi-turn-max-context-bytes {plan.max_context_bytes}")
        self._count(RawResponse(rec))
        self.records.append(rec)

    def _count(self, raw: RawResponse) -> None:
        """The live counters for one finished request (before its chunks are parsed)."""
        c = self.counters
        c[self.base + LiveCount.DONE] += 1
        c[self.base + LiveCount.ERRORS] += raw.record.error_class is not None
        c[self.base + LiveCount.CHUNKS] += len(raw.chunks)
        if self.cfg.live and raw.record.error_class is None:
            self._live_ttft(raw)

    def _keep(self, raw: RawResponse) -> None:
        self._count(raw)
        size = sum(len(x) for x in raw.chunks)
        if self.raw_bytes + size > MAX_RAW_BYTES:
            self.records.append(finish_record(raw))
        else:
            self.raw_bytes += size
            self.raws.append(raw)

    def _live_ttft(self, raw: RawResponse) -> None:
        """Publish an approximate TTFT for the live panel: the stamp of the first chunk holding
        content (the exact one comes from the parse after the run)."""
        rec = raw.record
        origin = rec.intended_ns if self.cfg.is_rate_mode else rec.start_ns
        for chunk, stamp in zip(raw.chunks[:8], raw.stamps, strict=False):
            if _FIRST_CONTENT.search(chunk):
                c, written = self.counters, self.counters[self.base + LiveCount.TTFT_WRITTEN]
                c[self.base + len(LiveCount) + written % TTFT_RING] = (stamp - origin) // 1000
                c[self.base + LiveCount.TTFT_WRITTEN] = written + 1
                return

    async def _drain(self) -> None:
        while self.tasks:
            if self.is_interrupted:
                for task in list(self.tasks):
                    task.cancel()
            await asyncio.wait(list(self.tasks), timeout=TICK_S)

    async def _monitor(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            expected = loop.time() + TICK_S
            await asyncio.sleep(TICK_S)
            self.lags_ms.append(max(0.0, (loop.time() - expected) * 1e3))
            self.lag_at_s.append((now_ns() - self.t0) / 1e9)
            if not self.is_interrupted and self.stop_event.is_set():
                self.is_interrupted = True
                self.dispatcher.cancel()
                for task in list(self.tasks):
                    task.cancel()


async def _sleep_until(when_ns: int) -> None:
    delay = (when_ns - now_ns()) / 1e9
    if delay > 0:
        await asyncio.sleep(delay)
    # NOTE: uvloop timers have 1 ms resolution and may fire early; yield until the exact time.
    while now_ns() < when_ns:
        await asyncio.sleep(0)


def _new_record(item: WorkItem, worker: int) -> RequestRecord:
    return RequestRecord(index=item.index, worker=worker, intended_ns=0, start_ns=0, end_ns=0,
                         input_len=item.input_len, is_exact_input_len=item.is_exact_input_len,
                         output_len_asked=item.output_len)


def worker_main(cfg: RunConfig, plan: WorkerPlan, conn, barrier, start_ns, counters, stop_event) -> None:
    """Process entry point: run the plan on uvloop and send the result back through `conn`."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    import uvloop

    result = uvloop.run(_Worker(cfg, plan, counters, stop_event).run(barrier, start_ns))
    conn.send_bytes(msgspec.msgpack.encode(result))
    conn.close()
