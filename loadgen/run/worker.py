"""A worker process: one uvloop, one httpx client, its share of the load, its own health figures.

The parent hands each worker its items (request bodies with intended start offsets for the rate
mode), a barrier to start together, shared counters for the live display and a stop event
(Ctrl-C). The worker sends back its per-request records and health through a pipe.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import os
import resource
import signal
import time
from collections import deque
from dataclasses import dataclass, replace
from enum import IntEnum

import msgspec
import numpy as np

from loadgen.measure.records import RequestRecord, WorkerHealth, WorkerResult
from loadgen.measure.sketch import SketchBuilder
from loadgen.plan.config import RunConfig
from loadgen.plan.datasets import load_tokenizer
from loadgen.run.client import (
    FIRST_CONTENT,
    Client,
    RawResponse,
    finish_record,
    finish_with_answer,
    turn_body,
)
from loadgen.run.clock import now_ns

TICK_S = 0.05
BARRIER_TIMEOUT_S = 600.0
MAX_RAW_BYTES = 256 << 20
GC_YOUNG_THRESHOLD = 50_000


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
    url_index: int = 0  # issue 32: which of RunConfig.targets it goes to
    model_index: int = 0  # issue 32: which model of a --model mix its body names
    cancel_after_s: float | None = None  # issue 32: cancelled this long after its send began, if unfinished


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
        prefill_limit = cfg.worker_prefill_concurrency(plan.worker)
        self.prefill = asyncio.Semaphore(prefill_limit) if prefill_limit else None
        self.raws: list[RawResponse] = []
        self.records: list[RequestRecord] = []
        self.tasks: set[asyncio.Task] = set()
        self.lags_ms: list[float] = []
        self.raw_bytes = 0
        self.is_interrupted = False
        self.in_flight = 0
        self.full_at_s: float | None = None
        self.lag_at_s: list[float] = []
        self.run_wait_ms: list[float] = []
        self.freed: deque[int] = deque()
        self.delays = _Delays()

    async def run(self, barrier, start_ns) -> WorkerResult:
        num_conn = self.limit or max(64, len(self.plan.items))
        async with Client(self.cfg, num_conn) as client:
            self.client = client
            self.requests = {it.index: client.prepare(it.body, it.index, it.url_index) for it in self.plan.items}
            await self._warmup()
            await asyncio.get_running_loop().run_in_executor(None, barrier.wait, BARRIER_TIMEOUT_S)
            self.t0 = start_ns.value
            await asyncio.sleep(max(self.t0 - now_ns(), 0) / 1e9)
            # NOTE: what exists now (plans, prepared requests, connections) lives the whole run: the
            # collector skips it, and runs a young pass every GC_YOUNG_THRESHOLD new containers
            # instead of 700 (each read allocates three, which die at once; what the run keeps,
            # bodies and records, would otherwise be walked over and over).
            gc.freeze()
            thresholds = gc.get_threshold()
            gc.set_threshold(GC_YOUNG_THRESHOLD, *thresholds[1:])
            cpu0, wall0, usage0 = time.process_time(), time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
            monitor = asyncio.create_task(self._monitor())
            self.dispatcher = asyncio.create_task(self._dispatch())
            try:
                await self.dispatcher
            except asyncio.CancelledError:
                pass
            await self._drain()
            gc.set_threshold(*thresholds)
            gc.unfreeze()
            monitor.cancel()
            usage = resource.getrusage(resource.RUSAGE_SELF)
            health = WorkerHealth(worker=self.plan.worker, cpu_s=time.process_time() - cpu0,
                                  wall_s=time.perf_counter() - wall0, loop_lag_ms=self.lags_ms,
                                  sys_cpu_s=usage.ru_stime - usage0.ru_stime,
                                  num_sleeps=usage.ru_nvcsw - usage0.ru_nvcsw, lag_at_s=self.lag_at_s,
                                  full_at_s=self.full_at_s, limit=self.limit or 0,
                                  run_wait_ms=self.run_wait_ms,
                                  num_involuntary_switches=usage.ru_nivcsw - usage0.ru_nivcsw)
            _read_health(client, health)
        tokenizer = load_tokenizer(self.plan.tokenizer_path)
        cpu1 = time.process_time()
        # NOTE: parsing makes no reference cycles; with the collector on, each of its passes
        # re-walks every kept record (parse 1.7 -> 1.5 µs per event in a 5 s flood run).
        gc.disable()
        try:
            rule = self.cfg.token_event_rule
            self.records += [finish_record(raw, tokenizer, self.delays, rule) for raw in self.raws]
        finally:
            gc.enable()
        health.parse_cpu_s = time.process_time() - cpu1
        health.num_events = sum([len(r.chunk_ns) for r in self.records])
        if health.stamp_source != "loop":
            health.client_delay = self.delays.builder.flush().to_dict()
        return WorkerResult(records=self.records, health=health, interrupted=self.is_interrupted)

    async def _warmup(self) -> None:
        sem = asyncio.Semaphore(self.limit or len(self.plan.warmup) or 1)

        async def one(item: WorkItem) -> None:
            async with sem:
                request = self.client.prepare(item.body, url_index=item.url_index)
                await self.client.send(request, RawResponse(_new_record(item, 0)))

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
            if self.prefill is not None and item.session is None:
                await self.prefill.acquire()
                # NOTE: so is waiting for a prefill slot (--prefill-concurrency).
                intended = max(intended, now_ns()) if item.offset_s is not None else now_ns()
            if self.is_interrupted or (deadline and now_ns() >= deadline):
                if sem is not None:
                    sem.release()
                if self.prefill is not None and item.session is None:
                    self.prefill.release()
                break
            if item.session is None:
                freed = self.freed.popleft() if self.freed else None
                task = asyncio.create_task(self._one(item, intended, sem, freed))
            else:
                task = asyncio.create_task(self._session(item, intended, sem))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    async def _one(self, item: WorkItem, intended_ns: int, sem, freed_ns: int | None = None) -> None:
        rec = _new_record(item, self.plan.worker)
        rec.intended_ns, rec.slot_freed_ns = intended_ns, freed_ns
        raw = RawResponse(rec, is_stream=self.cfg.stream)
        self.counters[self.base + LiveCount.IN_FLIGHT] += 1
        self.in_flight += 1
        if self.full_at_s is None and self.limit and self.in_flight >= self.limit:
            self.full_at_s = (now_ns() - self.t0) / 1e9
        first_token = _Once(self.prefill.release) if self.prefill is not None else None
        try:
            await self.client.send(self._request(item), raw, first_token, item.cancel_after_s)
        finally:
            if first_token is not None:
                first_token()  # NOTE: a request that ended without a token frees its prefill slot here
            self.counters[self.base + LiveCount.IN_FLIGHT] -= 1
            self.in_flight -= 1
            if sem is not None:
                # NOTE: the next request sent takes this slot (with a prefill cap it may wait for a
                # prefill slot too: that wait is chosen, not the client's refill lag, so none is kept)
                if not (self.cfg.is_rate_mode or self.cfg.ramp_up_s or self.prefill is not None):
                    self.freed.append(rec.end_ns)
                sem.release()
        self._keep(raw)

    def _request(self, item: WorkItem):
        """The prepared request; a repeat (--duration) with --request-id-prefix gets its own id."""
        if item.index >= self.plan.num_total and self.cfg.request_id_prefix is not None:
            return self.client.prepare(item.body, item.index, item.url_index)
        return self.requests[item.index % self.plan.num_total]

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
                    request = self.client.prepare(body, plan.first_index + turn, item.url_index)
                else:
                    request = self.requests[item.index]
                rec = RequestRecord(index=plan.first_index + turn, worker=self.plan.worker, intended_ns=intended_ns,
                                    start_ns=0, end_ns=0, input_len=plan.input_len(turn),
                                    is_exact_input_len=item.is_exact_input_len and turn == 0,
                                    output_len_asked=plan.output_lens[turn], session=item.index, turn=turn,
                                    url_index=item.url_index, model_index=item.model_index)
                raw = RawResponse(rec, is_stream=self.cfg.stream)
                await self.client.send(request, raw)
                self._count(raw)
                rec, answer = finish_with_answer(raw, client_delays=self.delays, rule=self.cfg.token_event_rule)
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
                            url_index=item.url_index, model_index=item.model_index,
                            error_message=f"turn not sent: the conversation would be {context_bytes} bytes, past "
                            f"--multi-turn-max-context-bytes {plan.max_context_bytes}")
        self._count(RawResponse(rec))
        self.records.append(rec)

    def _count(self, raw: RawResponse) -> None:
        """The live counters for one finished request (before its chunks are parsed)."""
        c = self.counters
        c[self.base + LiveCount.DONE] += 1
        c[self.base + LiveCount.ERRORS] += raw.record.is_failed
        c[self.base + LiveCount.CHUNKS] += len(raw.chunks)
        if self.cfg.live and raw.record.error_class is None:
            self._live_ttft(raw)

    def _keep(self, raw: RawResponse) -> None:
        self._count(raw)
        size = sum(len(x) for x in raw.chunks)
        if self.raw_bytes + size > MAX_RAW_BYTES:
            self.records.append(finish_record(raw, client_delays=self.delays, rule=self.cfg.token_event_rule))
        else:
            self.raw_bytes += size
            self.raws.append(raw)

    def _live_ttft(self, raw: RawResponse) -> None:
        """Publish an approximate TTFT for the live panel: the stamp of the first chunk holding
        content (the exact one comes from the parse after the run)."""
        rec = raw.record
        origin = rec.intended_ns if self.cfg.is_rate_mode else rec.start_ns
        for chunk, stamp in zip(raw.chunks[:8], raw.stamps, strict=False):
            if FIRST_CONTENT.search(chunk):
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
        waits = _RunWait()
        try:
            await self._tick(loop, waits)
        finally:
            waits.close()

    async def _tick(self, loop, waits: _RunWait) -> None:
        while True:
            expected = loop.time() + TICK_S
            await asyncio.sleep(TICK_S)
            self.lags_ms.append(max(0.0, (loop.time() - expected) * 1e3))
            self.lag_at_s.append((now_ns() - self.t0) / 1e9)
            if (wait_ms := waits.since_last()) is not None:
                self.run_wait_ms.append(wait_ms)
            if self.client.lean is not None:
                self.client.lean.clock.recheck()
            if not self.is_interrupted and self.stop_event.is_set():
                self.is_interrupted = True
                self.dispatcher.cancel()
                for task in list(self.tasks):
                    task.cancel()


class _Once:
    """Calls `fn` on the first call only (a prefill slot is freed at the first token or the end)."""

    def __init__(self, fn) -> None:
        self.fn = fn

    def __call__(self) -> None:
        if self.fn is not None:
            fn, self.fn = self.fn, None
            fn()


class _Delays:
    """Collects client delays (ns, per read) into a log sketch, in batches (bounded memory)."""

    def __init__(self) -> None:
        self.builder = SketchBuilder()

    def extend(self, delays_ns: list[int]) -> None:
        if delays_ns:
            self.builder.extend(np.asarray(delays_ns, dtype=np.float64) / 1e6)


class _RunWait:
    """This thread's time runnable but waiting for a CPU (`/proc/thread-self/schedstat`, Linux)."""

    def __init__(self) -> None:
        try:
            self._fd: int | None = os.open("/proc/thread-self/schedstat", os.O_RDONLY)
        except OSError:
            self._fd = None
        self._last = self._read()

    def _read(self) -> int | None:
        if self._fd is None:
            return None
        try:
            return int(os.pread(self._fd, 128, 0).split()[1])
        except (OSError, IndexError, ValueError):
            return None

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def since_last(self) -> float | None:
        """Milliseconds waited since the previous call (None where not available)."""
        now = self._read()
        if now is None or self._last is None:
            return None
        wait, self._last = (now - self._last) / 1e6, now
        return wait


def _read_health(client: Client, health: WorkerHealth) -> None:
    """The transport's figures: where stamps came from, clock steps, how reading kept up."""
    health.stamp_source = client.stamp_source
    if client.lean is None:
        return
    clock, stats = client.lean.clock, client.lean.read_stats
    health.num_clock_steps, health.max_clock_step_ms = clock.num_steps, clock.max_step_ns / 1e6
    health.num_unstamped_reads, health.num_stamp_after_read = stats.num_unstamped, stats.num_stamp_after_read
    health.num_full_reads, health.max_queued_bytes = stats.num_full_reads, stats.max_queued_bytes
    health.num_window_full = stats.num_window_full


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
                         output_len_asked=item.output_len, url_index=item.url_index,
                         model_index=item.model_index)


def worker_main(cfg: RunConfig, plan: WorkerPlan, conn, barrier, start_ns, counters, stop_event) -> None:
    """Process entry point: run the plan on uvloop and send the result back through `conn`."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    import uvloop

    result = uvloop.run(_Worker(cfg, plan, counters, stop_event).run(barrier, start_ns))
    conn.send_bytes(msgspec.msgpack.encode(result))
    conn.close()
