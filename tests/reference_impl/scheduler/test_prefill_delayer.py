"""Table tests of the H5 prefill delayer decision, for several ranks, without processes."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from reference_impl.config import ServerArgs
from reference_impl.scheduler.prefill_delayer import (
    NO_PREFILL,
    OUTCOME_KEYS,
    Decision,
    Delay,
    DelayerConfig,
    DelayerState,
    PrefillDelayer,
    RankInfo,
    RecentPrefillBatchSizes,
    decide,
    estimated_attempt_size,
    queue_min,
)

ALL = [True, True, True, True]
MIXED = [True, False, True, False]
NONE = [False, False, False, False]
ALLOW_NO_WAIT = (True, "no_wait")
DELAY = (False, "delay")


@dataclass(frozen=True)
class NegotiateCall:
    """One pass: per-rank values (a scalar means every rank) and the expected outcome."""

    prefillable: list[bool]
    expected: tuple[bool, str]
    token_usage: float | list[float] = 0.9
    running_batch: int | list[int] = 0
    max_prefill_bs: int | list[int] = 0
    waiting_queue_len: int | list[int] = 0
    now: float = 0.0

    def ranks(self) -> list[RankInfo]:
        num_ranks = len(self.prefillable)
        return [
            RankInfo(
                prefillable=self.prefillable[i],
                token_usage=_at(self.token_usage, i, num_ranks),
                running_batch=_at(self.running_batch, i, num_ranks),
                max_prefill_bs=_at(self.max_prefill_bs, i, num_ranks),
                waiting_queue_len=_at(self.waiting_queue_len, i, num_ranks),
            )
            for i in range(num_ranks)
        ]


def _at(value, i: int, num_ranks: int):
    if isinstance(value, list):
        assert len(value) == num_ranks
        return value[i]
    return value


@dataclass(frozen=True)
class NegotiateTestCase:
    name: str
    calls: list[NegotiateCall]
    config: dict = field(default_factory=dict)

    def delayer_config(self) -> DelayerConfig:
        defaults = dict(max_delay_passes=100, token_usage_low_watermark=0.8,
                        queue_min_ratio=None, max_delay_ms=5000.0, max_running_requests=1024)
        return DelayerConfig(**(defaults | self.config))


def _queue(expected, waiting=10, now=0.0, **kwargs) -> NegotiateCall:
    """All ranks prefillable, running 100, max prefill bs 80: queue_min is 50 at ratio 0.5."""
    values = dict(running_batch=100, max_prefill_bs=80, waiting_queue_len=waiting, now=now)
    return NegotiateCall(ALL, expected, **(values | kwargs))


def _slot(expected, running=120, now=0.0, **kwargs) -> NegotiateCall:
    """All ranks prefillable, 128 slots, max prefill bs 16: the slot condition holds above 112."""
    running_batch = running if isinstance(running, list) else [100, running, 100, 100]
    values = dict(running_batch=running_batch, max_prefill_bs=16, now=now)
    return NegotiateCall(ALL, expected, **(values | kwargs))


QUEUE = dict(queue_min_ratio=0.5)
SLOT = dict(max_running_requests=128)
WAIT_SUCCESS = (True, "wait_success")
WAIT_TIMEOUT = (True, "wait_timeout")

CASES = [
    NegotiateTestCase("none_prefillable", [NegotiateCall(NONE, (True, ""))]),
    NegotiateTestCase("all_prefillable", [NegotiateCall(ALL, ALLOW_NO_WAIT)] * 2),
    NegotiateTestCase("mixed_delay", [NegotiateCall(MIXED, DELAY)] * 3),
    NegotiateTestCase("mixed_watermark_force_allow", [
        NegotiateCall(MIXED, (True, "token_watermark"), token_usage=[0.5, 0.9, 0.9, 0.9]),
    ]),
    NegotiateTestCase("mixed_watermark_disabled", [
        NegotiateCall(MIXED, DELAY, token_usage=[0.5, 0.9, 0.9, 0.9]),
    ], dict(token_usage_low_watermark=None)),
    NegotiateTestCase("mixed_watermark_not_prefillable", [
        NegotiateCall([False, False, True, False], DELAY, token_usage=[0.5, 0.9, 0.9, 0.9]),
    ]),
    NegotiateTestCase("mixed_watermark_ends_delay", [
        NegotiateCall(MIXED, DELAY),
        NegotiateCall(MIXED, (True, "token_watermark"), token_usage=[0.9, 0.9, 0.1, 0.9]),
        NegotiateCall(MIXED, DELAY),
    ]),
    NegotiateTestCase("mixed_pass_cap", [
        NegotiateCall(MIXED, DELAY),
        NegotiateCall(MIXED, DELAY),
        NegotiateCall(MIXED, WAIT_TIMEOUT),
        NegotiateCall(MIXED, DELAY),
    ], dict(max_delay_passes=3)),
    NegotiateTestCase("mixed_pass_cap_of_one", [
        NegotiateCall(MIXED, WAIT_TIMEOUT),
    ], dict(max_delay_passes=1)),
    NegotiateTestCase("mixed_then_none_ends_delay", [
        NegotiateCall(MIXED, DELAY),
        NegotiateCall(NONE, (True, "")),
        NegotiateCall(ALL, ALLOW_NO_WAIT),
    ]),
    NegotiateTestCase("wait_success_after_mixed_delay", [
        NegotiateCall(MIXED, DELAY),
        NegotiateCall(ALL, WAIT_SUCCESS),
        NegotiateCall(ALL, ALLOW_NO_WAIT),
    ]),
    NegotiateTestCase("all_watermark_force_allow_keeps_skip_first", [
        _slot((True, "token_watermark"), token_usage=[0.9, 0.9, 0.9, 0.5]),
        _slot(ALLOW_NO_WAIT),
        _slot(DELAY),
    ], SLOT),
    NegotiateTestCase("slot_condition", [
        _slot(ALLOW_NO_WAIT),
        _slot(DELAY),
        _slot(DELAY),
        _slot(WAIT_SUCCESS, running=112),
        _slot(DELAY),
    ], SLOT),
    NegotiateTestCase("slot_condition_below_threshold", [_slot(ALLOW_NO_WAIT, running=112)] * 3,
                      SLOT),
    # Upstream's current rule: a slot-only delay ends by passes, as a mixed-rank delay does.
    NegotiateTestCase("slot_condition_pass_cap", [
        _slot(ALLOW_NO_WAIT), _slot(DELAY), _slot(DELAY), _slot(WAIT_TIMEOUT), _slot(DELAY),
    ], SLOT | dict(max_delay_passes=3)),
    NegotiateTestCase("slot_condition_pass_cap_of_one", [
        _slot(ALLOW_NO_WAIT), _slot(WAIT_TIMEOUT), _slot(WAIT_TIMEOUT),
    ], SLOT | dict(max_delay_passes=1)),
    NegotiateTestCase("slot_pass_cap_in_optimized_form", [
        _slot(ALLOW_NO_WAIT, waiting_queue_len=64),
        _slot(DELAY, waiting_queue_len=64),
        _slot(DELAY, waiting_queue_len=64),
        _slot(WAIT_TIMEOUT, waiting_queue_len=64),
    ], SLOT | QUEUE | dict(max_delay_passes=3)),
    NegotiateTestCase("mixed_passes_count_toward_slot_cap", [
        NegotiateCall(MIXED, DELAY),
        _slot((True, "wait_success")),  # skip-first spends the bypass, ends the delay
        _slot(DELAY),
        NegotiateCall(MIXED, DELAY),
        _slot(WAIT_TIMEOUT),
    ], SLOT | dict(max_delay_passes=3)),
    NegotiateTestCase("slot_condition_held_by_one_rank", [
        _slot(ALLOW_NO_WAIT, max_prefill_bs=[16, 0, 0, 0]),
        _slot(DELAY, max_prefill_bs=[16, 0, 0, 0]),
    ], SLOT),
    NegotiateTestCase("skip_first_after_mixed_delay", [
        NegotiateCall(MIXED, DELAY, now=1.0),
        _slot(WAIT_SUCCESS, now=2.0),
        _slot(DELAY, now=3.0),
    ], SLOT),
    # Queue condition: no skip-first bypass; it delays on its very first pass.
    NegotiateTestCase("queue_condition_delays_first_pass", [_queue(DELAY), _queue(DELAY)], QUEUE),
    NegotiateTestCase("queue_condition_leaves_skip_first_to_slot", [
        _queue(DELAY, max_prefill_bs=16), _queue(WAIT_SUCCESS, waiting=50, max_prefill_bs=16),
        _slot(ALLOW_NO_WAIT, waiting_queue_len=64), _slot(DELAY, waiting_queue_len=64),
    ], QUEUE | SLOT),
    NegotiateTestCase("queue_condition_just_below", [_queue(DELAY, waiting=49)] * 2, QUEUE),
    NegotiateTestCase("queue_condition_at_threshold", [_queue(ALLOW_NO_WAIT, waiting=50)] * 3,
                      QUEUE),
    NegotiateTestCase("queue_condition_above_threshold", [_queue(ALLOW_NO_WAIT, waiting=64)] * 3,
                      QUEUE),
    NegotiateTestCase("queue_condition_longest_queue_counts", [
        _queue(ALLOW_NO_WAIT, waiting=[10, 10, 64, 10]),
        _queue(ALLOW_NO_WAIT, waiting=[10, 10, 64, 10]),
    ], QUEUE),
    NegotiateTestCase("queue_condition_largest_running_batch_counts", [
        _queue(DELAY, running_batch=[20, 20, 100, 20], waiting=30),
    ], QUEUE),
    NegotiateTestCase("queue_condition_disabled_when_ratio_unset", [_queue(ALLOW_NO_WAIT)] * 3),
    # Threshold int(running * ratio), not capped by the observed max_prefill_bs ...
    NegotiateTestCase("queue_min_not_capped_by_max_prefill_bs", [
        _queue(DELAY, max_prefill_bs=1), _queue(DELAY, max_prefill_bs=1),
        _queue(WAIT_SUCCESS, max_prefill_bs=1, waiting=50),
    ], QUEUE),
    # ... only by --prefill-max-requests when set.
    NegotiateTestCase("queue_min_capped_by_prefill_max_requests", [
        _queue(DELAY, waiting=7), _queue(WAIT_SUCCESS, waiting=8), _queue(ALLOW_NO_WAIT, waiting=8),
    ], QUEUE | dict(prefill_max_requests=8)),
    NegotiateTestCase("queue_min_rounds_down", [
        _queue(ALLOW_NO_WAIT, running_batch=3, waiting=1),
        _queue(DELAY, running_batch=4, waiting=1),
    ], QUEUE),
    NegotiateTestCase("queue_min_of_zero", [
        _queue(ALLOW_NO_WAIT, running_batch=1, waiting=0),
        _queue(ALLOW_NO_WAIT, running_batch=1, waiting=0),
    ], QUEUE),
    NegotiateTestCase("queue_condition_needs_running_batch", [
        _queue(ALLOW_NO_WAIT, running_batch=0, waiting=0),
        _queue(ALLOW_NO_WAIT, running_batch=0, waiting=0),
    ], QUEUE),
    NegotiateTestCase("wait_success_when_queue_fills", [
        _queue(DELAY), _queue(DELAY), _queue(DELAY), _queue(WAIT_SUCCESS, 60),
    ], QUEUE),
    # Bounded by wall clock only, never by passes.
    NegotiateTestCase("queue_condition_not_capped_by_passes", [
        *[_queue(DELAY, now=0.001 * i) for i in range(8)],
    ], QUEUE | dict(max_delay_passes=2)),
    NegotiateTestCase("queue_condition_wall_clock_timeout", [
        _queue(DELAY, now=10.0),
        _queue(DELAY, now=10.049),
        _queue(WAIT_SUCCESS, now=10.25),
        _queue(DELAY, now=10.26),
        _queue(DELAY, now=10.3),
        _queue(WAIT_SUCCESS, now=10.31),
    ], QUEUE | dict(max_delay_ms=50.0)),
    NegotiateTestCase("queue_condition_wall_clock_cap_reached_exactly", [
        _queue(DELAY, now=8.0),
        _queue(WAIT_SUCCESS, now=8.0625),
    ], QUEUE | dict(max_delay_ms=62.5)),
    NegotiateTestCase("queue_condition_deadline_counts_from_mixed_delay", [
        NegotiateCall(MIXED, DELAY, now=4.0),
        _queue(DELAY, now=4.03125),
        _queue(WAIT_SUCCESS, now=4.0625),
    ], QUEUE | dict(max_delay_ms=62.5)),
    # Several ranks, one shared elapsed time: every rank crosses the deadline on one pass.
    NegotiateTestCase("queue_deadline_shared_by_ranks", [
        _queue(DELAY, now=2.0, waiting=[10, 49, 0, 3], running_batch=[100, 100, 80, 100]),
        _queue(DELAY, now=2.03125, waiting=[49, 10, 3, 0], running_batch=[90, 100, 100, 100]),
        _queue(WAIT_SUCCESS, now=2.0625, waiting=[10, 10, 3, 0], running_batch=[100] * 4),
    ], QUEUE | dict(max_delay_ms=62.5)),
    NegotiateTestCase("wall_clock_timeout_keeps_slot_condition", [
        _slot(ALLOW_NO_WAIT, waiting_queue_len=64, now=0.0),  # slot alone: spends skip-first
        _slot(DELAY, waiting_queue_len=0, now=1.0),  # queue and slot
        _slot(DELAY, waiting_queue_len=0, now=10.0),  # queue past its deadline, slot holds
        _slot(DELAY, waiting_queue_len=0, now=20.0),
    ], SLOT | QUEUE | dict(max_delay_ms=50.0)),
    NegotiateTestCase("queue_deadline_on_first_pass_leaves_skip_first_to_slot", [
        _slot(DELAY, waiting_queue_len=0, now=0.0),
        _slot(WAIT_SUCCESS, waiting_queue_len=0, now=10.0),
        _slot(DELAY, waiting_queue_len=0, now=20.0),
    ], SLOT | QUEUE | dict(max_delay_ms=50.0)),
    NegotiateTestCase("queue_and_slot_queue_outlives_pass_cap", [
        _slot(ALLOW_NO_WAIT, waiting_queue_len=64, now=0.0),
        _slot(DELAY, waiting_queue_len=0, now=1.0),
        _slot(DELAY, waiting_queue_len=0, now=1.015625),
        _slot(DELAY, waiting_queue_len=0, now=1.03125),
        _slot(WAIT_TIMEOUT, waiting_queue_len=0, now=1.0625),
    ], SLOT | QUEUE | dict(max_delay_passes=2, max_delay_ms=62.5)),
    NegotiateTestCase("dp_division_of_max_running_requests", [
        _slot(ALLOW_NO_WAIT, running=[20] * 4), _slot(DELAY, running=[20] * 4),
    ], dict(max_running_requests=128, dp_size=4)),
    NegotiateTestCase("dp_division_rounds_up", [_slot(ALLOW_NO_WAIT, running=[17] * 4)] * 3,
                      dict(max_running_requests=130, dp_size=4)),
    NegotiateTestCase("dp_attention_keeps_max_running_requests", [
        _slot(ALLOW_NO_WAIT, running=[20] * 4),
    ] * 3, dict(max_running_requests=128, dp_size=4, enable_dp_attention=True)),
]


def _run_case(case: NegotiateTestCase) -> list[Decision]:
    config = case.delayer_config()
    state = DelayerState()
    decisions = []
    for call in case.calls:
        decision = decide(state, call.ranks(), config, call.now)
        state = decision.state
        decisions.append(decision)
    return decisions


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_negotiate(case: NegotiateTestCase):
    decisions = _run_case(case)
    got = [(d.allow, d.reason) for d in decisions]
    assert got == [call.expected for call in case.calls]


@pytest.mark.parametrize("num_ranks", [1, 2, 8])
def test_uniform_ranks_decide_alike_for_any_rank_count(num_ranks: int):
    config = DelayerConfig(queue_min_ratio=0.5, max_running_requests=1024)
    rank = RankInfo(prefillable=True, token_usage=0.9, running_batch=100, max_prefill_bs=80,
                    waiting_queue_len=10)
    first = decide(DelayerState(), [rank] * num_ranks, config, now=0.0)
    second = decide(first.state, [rank] * num_ranks, config, now=1.0)
    assert [(first.allow, first.reason), (second.allow, second.reason)] == [DELAY, DELAY]


def test_delay_state_records_start_and_counts_passes():
    config = DelayerConfig(max_running_requests=128)
    ranks = _slot(DELAY).ranks()
    state = DelayerState()
    for now in (1.0, 2.0, 3.0, 4.0):
        state = decide(state, ranks, config, now).state
    assert state == DelayerState(delay=Delay(start_time=2.0, num_passes=3), is_skip_first_used=True)
    released = decide(state, _slot(DELAY, running=100).ranks(), config, 5.0)
    assert released.state == DelayerState(delay=None, is_skip_first_used=True)


def test_mixed_delay_state_counts_passes():
    config = DelayerConfig()
    ranks = NegotiateCall(MIXED, DELAY).ranks()
    first = decide(DelayerState(), ranks, config, now=7.0)
    second = decide(first.state, ranks, config, now=8.0)
    assert first.state.delay == Delay(start_time=7.0, num_passes=1)
    assert second.state.delay == Delay(start_time=7.0, num_passes=2)
    assert not second.state.is_skip_first_used


def test_decide_is_pure():
    config = DelayerConfig(max_running_requests=128)
    ranks = _slot(DELAY).ranks()
    prev = DelayerState(is_skip_first_used=True)
    assert decide(prev, ranks, config, 1.0) == decide(prev, ranks, config, 1.0)
    assert prev == DelayerState(is_skip_first_used=True)


def test_decide_needs_a_rank():
    with pytest.raises(ValueError, match="at least one rank"):
        decide(DelayerState(), [], DelayerConfig(), now=0.0)


@pytest.mark.parametrize("kwargs", [
    dict(max_delay_passes=0),
    dict(max_running_requests=0),
    dict(dp_size=0),
    dict(max_delay_ms=-1.0),
    dict(max_delay_ms=float("nan")),
    dict(token_usage_low_watermark=1.5),
    dict(queue_min_ratio=0.0),
    dict(queue_min_ratio=1.5),
])
def test_config_refuses_bad_values(kwargs):
    with pytest.raises(ValueError):
        DelayerConfig(**kwargs)


def test_effective_max_running_requests():
    assert DelayerConfig(max_running_requests=130, dp_size=4).effective_max_running_requests == 33
    assert DelayerConfig(max_running_requests=128, dp_size=4,
                         enable_dp_attention=True).effective_max_running_requests == 128
    assert DelayerConfig(max_running_requests=7).effective_max_running_requests == 7


def test_config_from_server_args():
    args = ServerArgs(max_running_requests=64, prefill_delayer_max_delay_passes=5,
                      prefill_delayer_token_usage_low_watermark=0.3,
                      prefill_delayer_queue_min_ratio=0.25)
    config = DelayerConfig.from_server_args(args)
    assert config == DelayerConfig(max_delay_passes=5, token_usage_low_watermark=0.3,
                                   queue_min_ratio=0.25, max_delay_ms=5000.0,
                                   max_running_requests=64)
    assert config.is_queue_trigger_enabled
    legacy = DelayerConfig.from_server_args(ServerArgs(prefill_delayer_max_delay_ms=20.0))
    assert not legacy.is_queue_trigger_enabled and legacy.max_delay_ms == 20.0


def test_prefill_delayer_counts_outcomes():
    delayer = PrefillDelayer(DelayerConfig(max_running_requests=8, queue_min_ratio=0.5))
    idle = RankInfo(prefillable=False, token_usage=0.9, running_batch=0, max_prefill_bs=0,
                    waiting_queue_len=0)
    short = RankInfo(prefillable=True, token_usage=0.9, running_batch=6, max_prefill_bs=4,
                     waiting_queue_len=1)
    full = RankInfo(prefillable=True, token_usage=0.9, running_batch=2, max_prefill_bs=4,
                    waiting_queue_len=4)
    got = [delayer.should_allow(info, now) for now, info in
           enumerate([idle, short, short, short, full, idle])]
    assert got == [True, False, False, False, True, True]
    assert delayer.outcomes == dict.fromkeys(OUTCOME_KEYS, 0) | {
        NO_PREFILL: 2, "delay": 3, "wait_success": 1,
    }
    assert delayer.last_decision is not None and delayer.last_decision.reason == ""
    assert delayer.state == DelayerState(is_skip_first_used=False)


def test_recent_prefill_sizes_forget_a_peak_after_the_window():
    sizes = RecentPrefillBatchSizes(window_size=4)
    sizes.observe_attempt(100)
    got = []
    for size in (2, 1, 2, 2):
        sizes.observe_attempt(size)
        got.append(sizes.max_prefill_bs)
    assert got == [100, 100, 100, 2]


def test_recent_prefill_sizes_keep_a_recurring_peak():
    sizes = RecentPrefillBatchSizes(window_size=4)
    for size in (2, 1, 1, 2, 1, 1, 2):
        sizes.observe_attempt(size)
        assert sizes.max_prefill_bs == 2


def test_recent_prefill_sizes_refuse_empty_attempts():
    assert RecentPrefillBatchSizes().max_prefill_bs == 0
    with pytest.raises(ValueError):
        RecentPrefillBatchSizes(window_size=0)
    with pytest.raises(ValueError):
        RecentPrefillBatchSizes().observe_attempt(0)


def test_estimated_attempt_size():
    assert estimated_attempt_size(waiting_queue_len=3, num_free_slots=10) == 3
    assert estimated_attempt_size(waiting_queue_len=30, num_free_slots=10) == 10
    assert estimated_attempt_size(waiting_queue_len=0, num_free_slots=0) == 1


def test_config_from_dp_attention_server_args():
    args = ServerArgs(max_running_requests=130, dp_size=4, enable_dp_attention=True,
                      prefill_max_requests=16, prefill_delayer_queue_min_ratio=0.1)
    config = DelayerConfig.from_server_args(args)
    assert config.effective_max_running_requests == 33
    assert config.prefill_max_requests == 16 and config.dp_size == 4
    assert queue_min(running_batch=300, config=config) == 16
    assert queue_min(running_batch=100, config=config) == 10
