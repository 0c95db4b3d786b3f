"""Scheduler-process workloads: H4 token storage lifecycle stages, H5 prefill delayer runs
(DP-attention regime)."""

from __future__ import annotations

import random

from benchmarks.common import SEED, history_safe, set_single_thread
from benchmarks.workloads.args import create_form, form_args

H4_STAGES = ("ingest", "decode_append", "fill_rebuild", "batch_tensor", "finish", "lifecycle")
H4_NUM_REQS = 2
H4_DECODE_STEPS = 1000
DELAYER_MODES = ("off", "slot", "queue")
QUEUE_MIN_RATIO = 0.1
"""Upstream's default in the queue trigger's benchmark (sglang#23189 swept 0.1-0.4)."""
DP_SIZE = 4
DP_PROFILE = "gb200-moe-dp"


class TokenLifecycle:
    """H4: the token-id stages of ``num_reqs`` requests of ``prompt_len`` tokens, in one kit.

    Stages: ``ingest`` (prompt ids into the scheduler's ``Req``), ``decode_append`` (1K decode
    tokens appended per request), ``fill_rebuild`` (fill ids = prompt + output), ``batch_tensor``
    (one int64 tensor of every request's fill ids, as the engine builds it), ``finish`` (the
    finish concat, then the finished ids as a tensor for the prefix cache); ``lifecycle`` runs
    all five in order.
    """

    def __init__(self, args, prompt_len: int, stage: str, num_reqs: int = H4_NUM_REQS,
                 decode_steps: int = H4_DECODE_STEPS, seed: int = SEED):
        with history_safe():
            from reference_impl.messages import SamplingParams, TokenizedGenerateReq
            from reference_impl.scheduler.request import Req

            self.storage = create_form("H4", args.token_storage)
            self._Req = Req
        set_single_thread()
        rng = random.Random(seed)
        self.msgs = [TokenizedGenerateReq(f"bench-{i}", [rng.randrange(32, 50_000) for _ in range(prompt_len)],
                                          SamplingParams(max_new_tokens=decode_steps), stream=True)
                     for i in range(num_reqs)]
        self.decode_ids = [rng.randrange(32, 50_000) for _ in range(decode_steps)]
        self.reqs = self._ingest()
        for req in self.reqs:
            self._append(req)
        self.run = getattr(self, "_" + stage)

    def _ingest(self):
        return [self._Req(msg, self.storage, 0) for msg in self.msgs]

    def _append(self, req) -> None:
        out = self.storage.empty()
        append = out.append
        for tok in self.decode_ids:
            append(tok)
        req.output_ids = out

    def _decode_append(self) -> None:
        for req in self.reqs:
            self._append(req)

    def _fill_rebuild(self) -> None:
        for req in self.reqs:
            req.fill_ids = self.storage.concat(req.origin_input_ids, req.output_ids)

    def _batch_tensor(self):
        return self.storage.to_tensor([req.fill_ids for req in self.reqs])

    def _finish(self) -> list:
        cached = []
        for req in self.reqs:
            req.fill_ids = self.storage.concat(req.origin_input_ids, req.output_ids)
            cached.append(self.storage.to_tensor([req.fill_ids]))
        return cached

    def _lifecycle(self):
        self.reqs = self._ingest()
        self._decode_append()
        self._fill_rebuild()
        self._batch_tensor()
        return self._finish()


def _delayer_args(mode: str, queue_min_ratio: float, dp_size: int, sim_profile: str = DP_PROFILE):
    # NOTE: max_running_requests stays at its default (1,024 slots per rank), far above the
    # concurrency, so the slot condition never holds and the queue trigger is what is measured.
    overrides = {"sim_time": "virtual", "sim_profile": sim_profile, "dp_size": dp_size,
                 "enable_dp_attention": dp_size > 1}
    if mode != "off":
        overrides["enable_prefill_delayer"] = True
    if mode == "queue":
        return form_args("H5", "optimized", prefill_delayer_queue_min_ratio=queue_min_ratio,
                         **overrides)
    return form_args("H5", "legacy", **overrides)


class PrefillDelayerRun:
    """H5 in the DP-attention regime: the real scheduler ranks, delayer and sim engines.

    ``dp_size`` lockstep ranks (profile ``gb200-moe-dp``) on a virtual clock; closed loop:
    ``concurrency`` clients, each finished request replaced at once until ``num_requests``
    (default 4 x concurrency) have been sent. Prompt lengths are ``input_len``; output lengths
    uniform in [max(int(L * range_ratio), 1), L] for L = ``output_len`` (seeded).
    ``run()`` returns output tokens per virtual second, lockstep steps holding an extend, and
    the p99 gap between a request's consecutive tokens.
    """

    def __init__(self, mode: str, range_ratio: float, concurrency: int, input_len: int = 1000,
                 output_len: int = 1000, num_requests: int | None = None,
                 queue_min_ratio: float = QUEUE_MIN_RATIO, dp_size: int = DP_SIZE,
                 seed: int = SEED, sim_profile: str = DP_PROFILE):
        if mode not in DELAYER_MODES:
            raise ValueError(f"mode must be one of {DELAYER_MODES}, got {mode!r}")
        with history_safe():
            from reference_impl.scheduler.process import build_scheduler

            self.args = _delayer_args(mode, queue_min_ratio, dp_size, sim_profile)
            self._build = build_scheduler
        self.concurrency = concurrency
        self.msgs = _delayer_requests(num_requests or 4 * concurrency, input_len, output_len,
                                      range_ratio, seed)

    def run(self) -> dict[str, float]:
        scheduler = self._build(self.args)
        clock = scheduler.clock
        pending = list(reversed(self.msgs))
        for _ in range(min(self.concurrency, len(pending))):
            scheduler.add_request(pending.pop())
        last_token_at: dict[str, float] = {}
        gaps: list[float] = []
        while not scheduler.is_idle:
            out = scheduler.step()
            if out is None:
                continue
            now = clock.now()
            for rid, finish in zip(out.rids, out.finish_reasons, strict=True):
                if rid in last_token_at:
                    gaps.append(now - last_token_at[rid])
                last_token_at[rid] = now
                if finish is not None and pending:
                    scheduler.add_request(pending.pop())
        stats = scheduler.stats()
        gaps.sort()
        p99 = gaps[min(len(gaps) - 1, int(0.99 * len(gaps)))] if gaps else 0.0
        return {"output_tok_s": stats.num_generated_tokens / clock.now(),
                "prefill_steps": stats.num_prefill_steps,
                "p99_decode_gap_ms": p99 * 1000.0, "sim_seconds": clock.now()}


def _delayer_requests(num_requests: int, input_len: int, output_len: int, range_ratio: float,
                      seed: int) -> list:
    from reference_impl.messages import SamplingParams, TokenizedGenerateReq

    rng = random.Random(seed)
    low = max(int(output_len * range_ratio), 1)
    return [TokenizedGenerateReq(f"bench-{i}", [rng.randrange(32, 256) for _ in range(input_len)],
                                 SamplingParams(max_new_tokens=rng.randint(low, output_len), ignore_eos=True),
                                 stream=True)
            for i in range(num_requests)]
