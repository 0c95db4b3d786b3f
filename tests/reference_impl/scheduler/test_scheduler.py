"""The scheduler core on a virtual clock: budgets, limits, aborts, forms, delayer wiring."""

from __future__ import annotations

import pytest

from reference_impl.config import ServerArgs
from reference_impl.messages import SamplingParams, TokenizedGenerateReq
from reference_impl.scheduler.process import build_scheduler


def _args(**overrides) -> ServerArgs:
    return ServerArgs(sim_time="virtual", **overrides)


def _req(i: int, prompt_len: int = 50, max_new: int = 20, **sampling) -> TokenizedGenerateReq:
    ids = [(i * 31 + k) % 200 + 32 for k in range(prompt_len)]
    return TokenizedGenerateReq(f"r{i}", ids, SamplingParams(max_new_tokens=max_new, **sampling),
                                stream=True)


def _run(scheduler, max_steps: int = 100_000) -> dict[str, list[int]]:
    outputs: dict[str, list[int]] = {}
    for _ in range(max_steps):
        if scheduler.is_idle:
            return outputs
        out = scheduler.step()
        assert len(scheduler.running) <= scheduler.args.max_running_requests
        assert scheduler.num_used_tokens <= scheduler.max_total_tokens
        if out is not None:
            for rid, ids in zip(out.rids, out.new_token_ids, strict=True):
                outputs.setdefault(rid, []).extend(ids)
    raise AssertionError("scheduler did not drain")


def test_every_request_finishes_and_frees_its_budget():
    scheduler = build_scheduler(_args(max_running_requests=8, max_total_tokens=2000))
    for i in range(40):
        scheduler.add_request(_req(i, ignore_eos=True))
    outputs = _run(scheduler)
    assert sorted(outputs) == sorted(f"r{i}" for i in range(40))
    assert all(len(ids) == 20 for ids in outputs.values())
    assert scheduler.num_used_tokens == 0 and not scheduler.running and not scheduler.waiting
    stats = scheduler.stats()
    assert stats.num_prefill_steps >= 5 and stats.num_generated_tokens == 800
    assert scheduler.clock.now() > 0


def test_list_and_array_storage_generate_the_same_tokens():
    results = []
    for storage in ("list", "array"):
        scheduler = build_scheduler(_args(token_storage=storage))
        for i in range(10):
            scheduler.add_request(_req(i, max_new=64))
        results.append(_run(scheduler))
    assert results[0] == results[1]


def test_abort_frees_waiting_and_running_requests_at_once():
    scheduler = build_scheduler(_args(max_running_requests=2))
    for i in range(4):
        scheduler.add_request(_req(i, max_new=1000, ignore_eos=True))
    scheduler.step()
    assert len(scheduler.running) == 2 and len(scheduler.waiting) == 2
    for i in range(4):
        scheduler.abort(f"r{i}")
    assert scheduler.num_used_tokens == 0 and scheduler.is_idle is False
    out = scheduler.step()
    assert sorted(out.rids) == ["r0", "r1", "r2", "r3"]
    assert {r.type for r in out.finish_reasons} == {"abort"}
    assert scheduler.is_idle


def test_request_larger_than_the_cache_is_finished_not_stuck():
    scheduler = build_scheduler(_args(max_total_tokens=100))
    scheduler.add_request(_req(0, prompt_len=90, max_new=50))
    out = scheduler.step()
    assert out.rids == ["r0"] and out.finish_reasons[0].type == "abort"
    assert scheduler.is_idle


@pytest.mark.parametrize("ratio", [None, 0.5])
def test_prefill_delayer_is_consulted_and_counted(ratio):
    scheduler = build_scheduler(_args(enable_prefill_delayer=True, max_running_requests=16,
                                      prefill_delayer_queue_min_ratio=ratio))
    for i in range(64):
        scheduler.add_request(_req(i, max_new=30 + i % 7, ignore_eos=True))
    _run(scheduler)
    outcomes = scheduler.stats().prefill_delayer_outcomes
    assert sum(outcomes.values()) >= scheduler.stats().num_prefill_steps
    assert outcomes["delay"] > 0


def test_prefill_max_requests_caps_one_prefill():
    scheduler = build_scheduler(_args(prefill_max_requests=3))
    for i in range(7):
        scheduler.add_request(_req(i, max_new=50, ignore_eos=True))
    sizes = []
    for _ in range(3):
        before = len(scheduler.running)
        scheduler.step()
        sizes.append(len(scheduler.running) - before)
    assert sizes == [3, 3, 1]


@pytest.mark.parametrize("ratio", [None, 0.1])
def test_slot_only_delay_ends_by_passes_in_both_forms(ratio):
    """8 slots, 6 running, largest recent prefill 4: the slot condition holds until a finish
    (ratio 0.1 of 6 running is a queue threshold of 0: the slot condition acts alone)."""
    scheduler = build_scheduler(_args(enable_prefill_delayer=True, max_running_requests=8,
                                      prefill_max_requests=4, prefill_delayer_max_delay_passes=3,
                                      prefill_delayer_queue_min_ratio=ratio))
    for i in range(5):
        scheduler.add_request(_req(i, max_new=1000, ignore_eos=True))
    scheduler.step()
    scheduler.step()
    scheduler.add_request(_req(5, max_new=1000, ignore_eos=True))
    scheduler.step()  # 8 - 5 < 4: the one-shot skip-first lets it through
    assert len(scheduler.running) == 6
    scheduler.add_request(_req(6, max_new=1000, ignore_eos=True))
    got = []
    for _ in range(3):
        scheduler.step()
        got.append(scheduler.delayer.last_decision.reason)
    assert got == ["delay", "delay", "wait_timeout"]
    assert len(scheduler.running) == 7


def test_max_prefill_bs_is_a_window_of_recent_attempts():
    scheduler = build_scheduler(_args(max_running_requests=64))
    for i in range(40):
        scheduler.add_request(_req(i, max_new=200, ignore_eos=True))
    scheduler.step()
    assert scheduler.policy.max_prefill_bs == 40
    for _ in range(30):  # decode-only passes do not age the window
        scheduler.step()
    assert scheduler.policy.max_prefill_bs == 40
    for i in range(16):
        scheduler.add_request(_req(100 + i, max_new=200, ignore_eos=True))
        scheduler.step()
    assert scheduler.policy.max_prefill_bs == 1


@pytest.mark.parametrize("overrides", [{}, {"enable_dp_attention": True, "dp_size": 2},
                                       {"disaggregation_mode": "decode"}])
def test_finished_requests_carry_their_timing_and_others_none(overrides):
    scheduler = build_scheduler(_args(max_running_requests=4, **overrides))
    for i in range(6):
        scheduler.add_request(_req(i, max_new=5, ignore_eos=True))
    timings, num_outputs = {}, 0
    while not scheduler.is_idle:
        out = scheduler.step()
        if out is None:
            continue
        num_outputs += 1
        finished = {rid for rid, reason in zip(out.rids, out.finish_reasons, strict=True) if reason}
        assert set(out.timings or {}) == finished
        timings.update(out.timings or {})
    assert sorted(timings) == sorted(f"r{i}" for i in range(6)) and num_outputs > 6
    steps = 0 if overrides.get("disaggregation_mode") == "decode" else 1
    for t in timings.values():
        assert 0 < t.prefill_start <= t.prefill_end <= t.finished
        assert t.prefill_steps == steps
