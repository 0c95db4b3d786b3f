"""The parent process: builds the work, starts the workers, shows progress, merges the records.

The workers are forked here (`_Pool`) or, with `--ray-address`, Ray actors on a cluster
(`run/ray_pool.py`, same interface); `run()` picks one at start-up.

Ctrl-C sets a shared stop event: workers cancel what is in flight and send back what finished, so a
partial run is still summarised and written. A run is bounded: workers that do not answer within
`--timeout` plus a grace period after the stop are terminated.
"""

from __future__ import annotations

import multiprocessing as mp
import sys
import time
from dataclasses import dataclass, field, replace

import httpx
import msgspec

from loadgen.measure.breakdown import run_side_figures
from loadgen.measure.machine import load_avg_1m
from loadgen.measure.metrics import latencies, summarize
from loadgen.measure.records import RequestRecord, WorkerResult
from loadgen.measure.server_metrics import server_vs_client
from loadgen.measure.targets import Scrapers, energy_per_token
from loadgen.measure.timeline import cdf, timeline
from loadgen.plan.config import DatasetConfig, RayConfig, RunConfig
from loadgen.plan.datasets import build_prompts, upstream_prompts
from loadgen.plan.inputs import batch_prompts, request_images
from loadgen.plan.lengths import (
    SOURCE_ESTIMATE,
    SOURCE_FILE,
    SOURCE_IDS,
    SOURCE_SERVER,
    VOCAB_FILE,
    VOCAB_FLAG,
    VOCAB_SERVER,
    FileTokenizer,
    ServerTokenizer,
    file_vocab_size,
    probe_server,
    probe_vocab_size,
)
from loadgen.plan.mix import Pick, model_names, picks, warmup_picks
from loadgen.plan.prefix_cache import planned_hits, with_run_salt
from loadgen.plan.schedule import arrival_offsets_s, ramp_offsets_s, stage_offsets_s
from loadgen.plan.sessions import Session, build_sessions
from loadgen.plan.texts import Prompt
from loadgen.plan.upstream import PROMPTS_FROM
from loadgen.run.client import request_body
from loadgen.run.pool import STOP_GRACE_S, SetupError, live_totals
from loadgen.run.worker import (
    NUM_COUNTERS,
    SessionPlan,
    WorkerPlan,
    WorkItem,
    worker_main,
)

START_DELAY_NS = 20_000_000
#: How long warm workers wait for the parent's scrape after the warm-up (`_Pool.on_warm`).
WARM_HANDOFF_S = 30.0


@dataclass
class RunResult:
    """Merged records, per-worker health, the summary, and whether Ctrl-C cut the run short.

    `dataset_info` says how the prompt lengths were obtained (`input_lengths`)."""

    cfg: RunConfig
    model: str
    records: list[RequestRecord]
    summary: dict
    interrupted: bool
    dataset_info: dict = field(default_factory=dict)
    workers_lost: int = 0
    timeline: dict = field(default_factory=dict)
    cdf: dict = field(default_factory=dict)
    server_metrics: dict = field(default_factory=dict)
    load_avg_1m: float | None = None  # when the run began, before its workers


def first_model(cfg: RunConfig) -> str:
    """The first model id that the server's /v1/models lists; SetupError when there is none."""
    url = cfg.base_url.rstrip("/") + "/v1/models"
    try:
        r = httpx.get(url, headers=cfg.headers, timeout=min(cfg.timeout_s, 30), verify=cfg.tls_verify)
        r.raise_for_status()
        return r.json()["data"][0]["id"]
    except httpx.HTTPStatusError as exc:
        why = f"HTTP {exc.response.status_code}"
    except httpx.HTTPError as exc:
        why = f"{type(exc).__name__}: {exc}"
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        why = f"no model in the answer ({type(exc).__name__}: {exc})"
    raise SetupError(f"cannot list models at {url}: {why}. Is the server up? (--model skips this query)")


def wait_ready(cfg: RunConfig, timeout_s: float) -> None:
    """Wait until /v1/models answers 200 (vLLM's --ready-check-timeout-sec); SetupError past the timeout."""
    url = cfg.base_url.rstrip("/") + "/v1/models"
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if httpx.get(url, headers=cfg.headers, timeout=5, verify=cfg.tls_verify).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() >= deadline:
            raise SetupError(f"{url} did not answer 200 within --ready-check-timeout-sec {timeout_s:g}")
        time.sleep(1.0)


def prompt_tokenizer(cfg: RunConfig, dcfg: DatasetConfig):
    """The tokenizer that fits prompt lengths, and how lengths are obtained (said on stderr)."""
    if dcfg.name == "random-ids" and upstream_prompts(dcfg) is None:
        return None, SOURCE_IDS
    if dcfg.tokenizer_path is not None:
        try:
            return FileTokenizer(dcfg.tokenizer_path), SOURCE_FILE
        except Exception as exc:  # noqa: BLE001 - any load failure is a setup error
            raise SetupError(f"cannot load --tokenizer {dcfg.tokenizer_path}: {exc}") from None
    if not dcfg.use_server_tokenize:
        return None, SOURCE_ESTIMATE
    tok, why = probe_server(cfg.base_url, cfg.headers, min(cfg.timeout_s, 30), cfg.tls_verify)
    if tok is None:
        print(f"loadgen: {cfg.base_url}/tokenize unusable ({why}); prompt lengths are estimates "
              "(give --tokenizer for exact ones)", file=sys.stderr)
        return None, SOURCE_ESTIMATE
    return tok, SOURCE_SERVER


def ids_vocab(cfg: RunConfig, dcfg: DatasetConfig) -> tuple[DatasetConfig, str | None]:
    """loadgen's random-ids with the target's vocabulary size set, and where it came from: the
    --tokenizer file, --vocab-size, else the server's /detokenize; SetupError when none tells it."""
    if dcfg.name != "random-ids" or upstream_prompts(dcfg) is not None:
        return dcfg, None
    if dcfg.tokenizer_path is not None:
        try:
            return replace(dcfg, vocab_size=file_vocab_size(dcfg.tokenizer_path)), VOCAB_FILE
        except Exception as exc:  # noqa: BLE001 - any load failure is a setup error
            raise SetupError(f"cannot load --tokenizer {dcfg.tokenizer_path}: {exc}") from None
    if dcfg.vocab_size is not None:
        return dcfg, VOCAB_FLAG
    why = "--no-server-tokenize: not asked"
    if dcfg.use_server_tokenize:
        size, why = probe_vocab_size(cfg.base_url, cfg.headers, min(cfg.timeout_s, 30), cfg.tls_verify)
        if size is not None:
            return replace(dcfg, vocab_size=size), VOCAB_SERVER
    raise SetupError(f"--dataset random-ids draws token ids from the target's vocabulary, and "
                     f"{cfg.base_url}/detokenize did not tell its size ({why}): give --tokenizer (the "
                     "model's tokenizer file) or --vocab-size N")


def _num_items(cfg: RunConfig) -> int:
    if cfg.rate_stages:
        return len(stage_offsets_s(cfg.rate_stages, cfg.burstiness, cfg.num_prompts, cfg.seed))
    if cfg.num_prompts is not None:
        return cfg.num_prompts
    if cfg.is_rate_mode:
        return len(arrival_offsets_s(cfg.request_rate, cfg.burstiness, None, cfg.duration_s, cfg.seed))
    return max(cfg.concurrency or 1, 64)


def _prompts(cfg: RunConfig, dcfg: DatasetConfig, tokenizer, build=build_prompts) -> list:
    try:
        return build(dcfg, tokenizer)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SetupError(f"cannot build the {dcfg.name} dataset: {type(exc).__name__}: {exc}") from None
    except httpx.HTTPError as exc:
        raise SetupError(f"{cfg.base_url}/tokenize failed while fitting prompts: {exc}") from None


def with_chat_template(cfg: RunConfig, prompts: list[Prompt], tokenizer) -> tuple[list[Prompt], bool]:
    """On the chat backend, input lengths counted through the tokenizer's chat template, if it has one."""
    if cfg.backend != "openai-chat" or getattr(tokenizer, "chat_template", None) is None:
        return prompts, False
    return [replace(p, input_len=tokenizer.chat_len(p.prompt)) if isinstance(p.prompt, str) else p
            for p in prompts], True


def _offsets(cfg: RunConfig, num: int) -> list[float | None]:
    """Intended start offsets of `num` items: a ramp, rate stages, the arrival process in rate mode, else None."""
    if cfg.rate_stages:
        return stage_offsets_s(cfg.rate_stages, cfg.burstiness, num, cfg.seed)
    if cfg.ramp_up_strategy is not None:
        return ramp_offsets_s(cfg.ramp_up_strategy, cfg.ramp_up_start_rps, cfg.ramp_up_end_rps,
                              cfg.burstiness, num, cfg.seed)
    if cfg.is_rate_mode:
        return arrival_offsets_s(cfg.request_rate, cfg.burstiness, num, cfg.duration_s, cfg.seed)
    return [None] * num


def build_plans(cfg: RunConfig, dcfg: DatasetConfig, model: str, tokenizer=None,
                info: dict | None = None) -> list[WorkerPlan]:
    """Items spread round-robin over the workers, each with its intended offset in rate mode (a
    replayed trace: its own times / --trace-speedup). Facts of the plan (the planned prefix-cache
    hits) go into `info` when given."""
    if dcfg.name == "multi-turn":
        items, warm, num = _session_items(cfg, dcfg, model, tokenizer)
    else:
        items, warm, num = _request_items(cfg, dcfg, model, tokenizer, {} if info is None else info)
    return [
        WorkerPlan(w, items[w :: cfg.workers], warm[w :: cfg.workers], num, dcfg.tokenizer_path)
        for w in range(cfg.workers)
    ]


def _request_items(cfg: RunConfig, dcfg: DatasetConfig, model: str, tokenizer, info: dict) -> tuple[list, list, int]:
    if cfg.replay_trace:
        # NOTE: the trace's first N lines are measured; warm-up requests repeat its first lines.
        prompts = _prompts(cfg, replace(dcfg, num_prompts=cfg.num_prompts), tokenizer)
        num = len(prompts)
        offsets = [p.arrival_s / cfg.trace_speedup for p in prompts]
        prompts += [prompts[i % num] for i in range(cfg.warmup)]
    else:
        num = _num_items(cfg)
        prompts = _prompts(cfg, replace(dcfg, num_prompts=(num + cfg.warmup) * cfg.embedding_batch_size), tokenizer)
        prompts = batch_prompts(prompts, cfg.embedding_batch_size)
        offsets = _offsets(cfg, num)
        num = len(offsets)
    if dcfg.prefix_cache_hit_rate:
        info.update(planned_hits(prompts[num:num + cfg.warmup], prompts[:num]))
    prompts, _ = with_chat_template(cfg, prompts, tokenizer)
    names = model_names(cfg, model)

    def item(i: int, p: Prompt, offset: float | None, pick: Pick) -> WorkItem:
        images = request_images(cfg, i) if cfg.image_batch_size else ()
        return WorkItem(i, request_body(cfg, names[pick.model_index], p, images), p.input_len, p.is_exact_input_len,
                        p.output_len, offset, None, pick.url_index, pick.model_index, pick.cancel_after_s)

    chosen, warm_chosen = picks(cfg, num), warmup_picks(cfg, cfg.warmup)
    items = [item(i, prompts[i], offsets[i], chosen[i]) for i in range(num)]
    warm = [item(-1 - i, prompts[num + i], None, warm_chosen[i]) for i in range(cfg.warmup)]
    return items, warm, num


def _session_items(cfg: RunConfig, dcfg: DatasetConfig, model: str, tokenizer) -> tuple[list, list, int]:
    """One item per session (its first turn's body and the plan of the rest); warm-up items are
    the first turns of further sessions. Request indices run over all turns, session by session."""
    sessions: list[Session] = _prompts(cfg, replace(dcfg, num_prompts=cfg.num_prompts + cfg.warmup), tokenizer,
                                       build_sessions)
    measured = sessions[:cfg.num_prompts]
    offsets, items, first = _offsets(cfg, len(measured)), [], 0
    names, chosen = model_names(cfg, model), picks(cfg, len(measured))
    for i, (s, offset, pick) in enumerate(zip(measured, offsets, chosen, strict=True)):
        plan = SessionPlan(s.user_turns, s.user_lens, s.output_lens, dcfg.multi_turn_think_time_s, first,
                           dcfg.multi_turn_max_context_bytes)
        first += len(s.user_turns)
        prompt = Prompt(s.user_turns[0], s.user_lens[0], s.output_lens[0], True)
        body = request_body(cfg, names[pick.model_index], prompt)
        # NOTE: a session's turns stay on one server and model, and are not cancelled.
        items.append(WorkItem(i, body, s.user_lens[0], s.is_exact_input_len, s.output_lens[0], offset, plan,
                              pick.url_index, pick.model_index))
    warm_chosen = warmup_picks(cfg, len(sessions) - cfg.num_prompts)
    warm = [WorkItem(-1 - i, request_body(cfg, names[pick.model_index],
                                          Prompt(s.user_turns[0], s.user_lens[0], s.output_lens[0], True)),
                     s.user_lens[0], s.is_exact_input_len, s.output_lens[0], None, None, pick.url_index,
                     pick.model_index)
            for i, (s, pick) in enumerate(zip(sessions[cfg.num_prompts:], warm_chosen, strict=True))]
    return items, warm, first


class _Pool:
    """The worker processes and their shared counters, pipes, barrier and stop event.

    With a warm-up, the workers wait after it until the parent has called `on_warm` (if set):
    the server-metrics baseline is scraped there, between the warm-up and the run."""

    def __init__(self, cfg: RunConfig, plans: list[WorkerPlan]) -> None:
        ctx = mp.get_context("fork")
        self.counters = ctx.RawArray("q", NUM_COUNTERS * len(plans))
        self.stop_event = ctx.Event()
        self.start_ns = ctx.RawValue("q", 0)
        self.on_warm = None
        self.has_warmup = cfg.warmup > 0
        self.warm, self.go = ctx.Event(), ctx.Event()
        self.barrier = ctx.Barrier(len(plans), action=self._set_start)
        self.pipes, self.procs = [], []
        for plan in plans:
            recv, send = ctx.Pipe(duplex=False)
            proc = ctx.Process(target=worker_main, daemon=True,
                               args=(cfg, plan, send, self.barrier, self.start_ns, self.counters, self.stop_event))
            proc.start()
            send.close()
            self.pipes.append(recv)
            self.procs.append(proc)
        self.results: dict[int, WorkerResult] = {}
        self.lost_records: list[RequestRecord] = []  # NOTE: a dead forked worker's requests are missing

    def _set_start(self) -> None:
        # NOTE: runs in the last worker to reach the barrier; all workers share this origin.
        if self.has_warmup:
            self.warm.set()
            self.go.wait(WARM_HANDOFF_S)
        self.start_ns.value = time.perf_counter_ns() + START_DELAY_NS

    def totals(self) -> dict:
        return live_totals(list(self.counters))

    def poll(self, timeout: float) -> None:
        """Collect any finished worker's result (waits at most `timeout`)."""
        if self.warm.is_set() and not self.go.is_set():
            if self.on_warm is not None:
                self.on_warm()
            self.go.set()
        ready = mp.connection.wait([p for i, p in enumerate(self.pipes) if i not in self.results], timeout)
        for pipe in ready:
            i = self.pipes.index(pipe)
            try:
                self.results[i] = msgspec.msgpack.decode(pipe.recv_bytes(), type=WorkerResult)
            except EOFError:
                self.results[i] = None  # the worker died without a result
            self.procs[i].join(timeout=5)

    @property
    def is_done(self) -> bool:
        return len(self.results) == len(self.procs)

    def stop(self) -> None:
        self.stop_event.set()
        self.go.set()

    def terminate(self) -> None:
        for i, proc in enumerate(self.procs):
            if i not in self.results and proc.is_alive():
                proc.terminate()
                self.results[i] = None

    def close(self) -> None:
        """Nothing to free: the processes have ended or were terminated."""


def run(cfg: RunConfig, dcfg: DatasetConfig, progress=None, ray_cfg: RayConfig | None = None) -> RunResult:
    """Run the load; `progress(totals, elapsed_s, scraper)` is called a few times a second if given.

    With `ray_cfg` the workers are Ray actors on that cluster (`run/ray_pool.py`), else forked here."""
    if ray_cfg is None:
        return _run(cfg, dcfg, progress, None)
    from loadgen.run.ray_pool import RayCluster  # NOTE: ray is imported only when asked for

    cluster = RayCluster(ray_cfg, cfg.workers)
    try:
        if ray_cfg.is_auto_workers:
            cfg = replace(cfg, workers=cluster.num_cpus)
        return _run(cfg, dcfg, progress, cluster)
    finally:
        cluster.close()


def _run(cfg: RunConfig, dcfg: DatasetConfig, progress, cluster) -> RunResult:
    load_avg = load_avg_1m()
    model = cfg.model or first_model(cfg)
    dcfg, vocab_from = ids_vocab(cfg, with_run_salt(dcfg))
    tokenizer, source = prompt_tokenizer(cfg, dcfg)
    planned: dict = {}
    try:
        plans = build_plans(cfg, dcfg, model, tokenizer, planned)
    finally:
        if isinstance(tokenizer, ServerTokenizer):
            tokenizer.close()
    scraper = start_scraper(cfg)
    created_ns = time.perf_counter_ns()
    pool = _Pool(cfg, plans) if cluster is None else cluster.pool(cfg, plans)
    try:
        if scraper is not None:
            pool.on_warm = scraper.rebase if cfg.warmup else None
            scraper.begin()
        interrupted = _wait(pool, progress, scraper)
    finally:
        pool.close()
    results = [r for r in pool.results.values() if r is not None]
    lost = len(plans) - len(results)
    if lost and not interrupted and cluster is None:
        print(f"loadgen: {lost} of {len(plans)} worker process(es) died without a result (see "
              "the error above); their requests are missing from the results", file=sys.stderr)
    records = sorted((rec for r in results for rec in r.records), key=lambda r: r.index)
    if pool.lost_records:
        records = sorted(records + pool.lost_records, key=lambda r: r.index)
    lat = latencies(cfg, [r for r in records if r.ok])
    summary = summarize(cfg, records, [r.health for r in results], lat)
    summary.update(run_side_figures(cfg, records, summary["duration"]))
    interrupted = interrupted or any(r.interrupted for r in results)
    info = {"input_lengths": source, "length_convention": dcfg.convention,
            "prompts_from": PROMPTS_FROM.get(upstream_prompts(dcfg), "loadgen")}
    if vocab_from is not None:
        info.update(vocab_size=dcfg.vocab_size, vocab_from=vocab_from)
    if dcfg.cache_bust is not None:
        info["cache_bust"] = dcfg.cache_bust  # NOTE: the salt used (a fresh one when --cache-bust had none)
    info.update(planned)
    if with_chat_template(cfg, [], tokenizer)[1]:
        info["input_lengths"] += " + chat template (tokenizer_config.json)"
    summary["workers_lost"] = lost
    summary["startup_s"] = (pool.start_ns.value - created_ns) / 1e9 if pool.start_ns.value else None
    if cluster is not None:
        summary["cluster"] = pool.cluster_summary()
    t0 = min((r.intended_ns for r in records), default=pool.start_ns.value)
    server = scraper.stop(t0) if scraper is not None else {"status": "off"}
    interrupted = interrupted or (scraper is not None and scraper.is_interrupted)
    # NOTE: with several --base-url the metrics are the first server's alone, the client's figures all servers'.
    if not cfg.base_urls and (versus := server_vs_client(server, summary)) is not None:
        summary["server_vs_client"] = versus
    if (energy := energy_per_token(server, summary)) is not None:
        summary["energy"] = energy
    cpu_start = time.process_time()
    tl, points = timeline(cfg, records, cfg.timeline_interval_s), cdf(cfg, records, lat)
    tl["cpu_s"] = time.process_time() - cpu_start  # the parent's CPU for the timeline and CDFs
    return RunResult(cfg, model, records, summary, interrupted, info, lost, tl, points, server, load_avg)


def _wait(pool, progress, scraper) -> bool:
    """Poll the pool until every worker is done (Ctrl-C: stop, then terminate after the grace);
    whether the run was interrupted."""
    interrupted, stop_deadline = False, None
    start = time.perf_counter()
    while not pool.is_done:
        try:
            pool.poll(0.25)
            if progress is not None:
                progress(pool.totals(), time.perf_counter() - start, scraper)
            if stop_deadline is not None and time.perf_counter() > stop_deadline:
                pool.terminate()
        except KeyboardInterrupt:
            if interrupted:
                pool.terminate()
            interrupted = True
            pool.stop()
            stop_deadline = time.perf_counter() + STOP_GRACE_S
    return interrupted


def start_scraper(cfg: RunConfig) -> Scrapers | None:
    """The server-metrics scrapers (one per target) after their baseline scrapes; None with
    --no-server-metrics. A target without usable metrics gets one line on stderr and the run goes on."""
    if not cfg.server_metrics:
        return None
    scrapers = Scrapers(cfg.metrics_urls, cfg.server_metrics_interval_s, cfg.headers, cfg.tls_verify,
                        cfg.server_metrics_max_series)
    for status in scrapers.start():
        if status != "ok":
            print(f"loadgen: server metrics {status}; the run goes on without them "
                  "(--no-server-metrics silences this)", file=sys.stderr)
    return scrapers
