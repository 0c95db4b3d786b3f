"""H5's pure decision: a seeded sequence of scheduling passes through ``decide()``, 4 DP ranks."""

from __future__ import annotations

import random

from benchmarks.common import SEED, history_safe
from benchmarks.workloads.args import form_args
from benchmarks.workloads.scheduler import QUEUE_MIN_RATIO

NUM_PASSES = 2_000
NUM_RANKS = 4


class DecideSequence:
    """``run()`` feeds ``num_passes`` passes (seeded rank infos, 10 ms apart) through ``decide``,
    carrying the state as the scheduler does; it returns how many passes were allowed."""

    def __init__(self, form: str, num_passes: int = NUM_PASSES, num_ranks: int = NUM_RANKS,
                 seed: int = SEED):
        with history_safe():
            from reference_impl.scheduler.prefill_delayer import (
                DelayerConfig,
                DelayerState,
                RankInfo,
                decide,
            )

            ratio = QUEUE_MIN_RATIO if form == "optimized" else None  # not the default: set it
            args = form_args("H5", form, dp_size=num_ranks, enable_dp_attention=True,
                             enable_prefill_delayer=True, prefill_delayer_queue_min_ratio=ratio)
            self.config = DelayerConfig.from_server_args(args)
            self.config.queue_trigger  # noqa: B018 (chosen once, before any count)
            self.decide, self.initial = decide, DelayerState()
        rng = random.Random(seed)
        self.passes = [
            (tuple(RankInfo(prefillable=rng.random() < 0.9, token_usage=rng.random(),
                            running_batch=rng.randrange(0, 256), max_prefill_bs=rng.randrange(1, 32),
                            waiting_queue_len=rng.randrange(0, 64))
                   for _ in range(num_ranks)), 0.01 * k)
            for k in range(num_passes)]

    def run(self) -> int:
        state, decide, config, allowed = self.initial, self.decide, self.config, 0
        for ranks, now in self.passes:
            decision = decide(state, ranks, config, now)
            state = decision.state
            allowed += decision.allow
        return allowed
