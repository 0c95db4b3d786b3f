"""DP attention: lockstep ranks behind a round-robin router, one delayer decision per pass."""

from __future__ import annotations

import pytest

from reference_impl.config import ServerArgs
from reference_impl.engine.sim import PROFILES
from reference_impl.messages import SamplingParams, TokenizedGenerateReq
from reference_impl.scheduler.dp_group import DPGroup
from reference_impl.scheduler.process import build_scheduler

PROFILE = PROFILES["gb200-moe-dp"]


def _group(dp_size: int = 4, **overrides) -> DPGroup:
    args = ServerArgs(sim_time="virtual", sim_profile="gb200-moe-dp", dp_size=dp_size,
                      enable_dp_attention=True, **overrides)
    group = build_scheduler(args)
    assert isinstance(group, DPGroup)
    return group


def _req(i: int, prompt_len: int = 40, max_new: int = 20) -> TokenizedGenerateReq:
    ids = [(i * 17 + k) % 200 + 32 for k in range(prompt_len)]
    return TokenizedGenerateReq(f"r{i}", ids, SamplingParams(max_new_tokens=max_new, ignore_eos=True),
                                stream=True)


def _drain(group: DPGroup, max_steps: int = 100_000) -> dict[str, int]:
    num_tokens: dict[str, int] = {}
    for _ in range(max_steps):
        if group.is_idle:
            return num_tokens
        out = group.step()
        if out is not None:
            for rid, ids in zip(out.rids, out.new_token_ids, strict=True):
                num_tokens[rid] = num_tokens.get(rid, 0) + len(ids)
    raise AssertionError("group did not drain")


def test_router_is_round_robin():
    group = _group()
    for i in range(10):
        group.add_request(_req(i))
    assert [len(rank.waiting) for rank in group.ranks] == [3, 3, 2, 2]
    assert [r.rid for r in group.ranks[1].waiting] == ["r1", "r5", "r9"]


def test_every_request_finishes_on_its_rank():
    group = _group(dp_size=3)
    for i in range(12):
        group.add_request(_req(i, max_new=5 + i))
    assert _drain(group) == {f"r{i}": 5 + i for i in range(12)}
    stats = group.stats()
    assert stats.num_generated_tokens == sum(5 + i for i in range(12))
    assert stats.num_running_reqs == 0 and stats.num_used_tokens == 0


def test_extend_on_one_rank_makes_the_step_eager_for_all():
    group = _group()
    for i in range(4):
        group.add_request(_req(i, prompt_len=40))
    start = group.clock.now()
    group.step()  # every rank extends one 40-token prompt
    assert group.clock.now() - start == pytest.approx(PROFILE.eager_step_fixed_s
                                                      + PROFILE.prefill_time(40))
    start = group.clock.now()
    group.step()  # decode on every rank: a short graph step
    decode = group.clock.now() - start
    assert decode == pytest.approx(PROFILE.decode_time(1, 41))
    group.add_request(_req(9, prompt_len=400))  # lands on rank 0 alone
    start = group.clock.now()
    out = group.step()
    assert group.clock.now() - start == pytest.approx(PROFILE.eager_step_fixed_s
                                                      + PROFILE.prefill_time(400))
    # rank 0 extended, so its running request got no token; the other three decoded
    assert sorted(out.rids) == ["r1", "r2", "r3", "r9"]
    assert group.stats().num_prefill_steps == 2 and group.stats().num_decode_steps == 1


def test_idle_ranks_cost_nothing_in_a_graph_step():
    group = _group()
    group.add_request(_req(0))
    group.step()
    start = group.clock.now()
    group.step()
    assert group.clock.now() - start == pytest.approx(PROFILE.decode_time(1, 41))


@pytest.mark.parametrize("ratio", [None, 0.5])
def test_delayer_decides_once_per_pass_for_every_rank(ratio):
    group = _group(enable_prefill_delayer=True, prefill_delayer_queue_min_ratio=ratio)
    assert all(rank.delayer is None for rank in group.ranks)
    for i in range(8):
        group.add_request(_req(i, max_new=50 + 9 * i))
    num_passes = 0
    while not group.is_idle:
        group.step()
        num_passes += 1
        if num_passes == 60:  # some ranks have finished: a single new request is "mixed"
            group.add_request(_req(100, max_new=5))
    outcomes = group.stats().prefill_delayer_outcomes
    assert sum(outcomes.values()) == num_passes
    assert outcomes["delay"] > 0


def test_queue_trigger_groups_back_fill_prefills_across_ranks():
    """Closed loop, varied lengths: the queue trigger admits on all ranks in fewer extends."""
    def prefill_steps(ratio):
        group = _group(enable_prefill_delayer=ratio is not None,
                       prefill_delayer_queue_min_ratio=ratio)
        pending = [_req(i, max_new=80 + (i * 37) % 21) for i in range(96)][::-1]
        for _ in range(32):
            group.add_request(pending.pop())
        while not group.is_idle:
            out = group.step()
            for reason in (out.finish_reasons if out else []):
                if reason is not None and pending:
                    group.add_request(pending.pop())
        return group.stats().num_prefill_steps

    assert prefill_steps(0.5) < prefill_steps(None)


def test_abort_reaches_the_right_rank():
    group = _group()
    for i in range(4):
        group.add_request(_req(i, max_new=1000))
    group.step()
    group.abort("r2")
    out = group.step()
    assert "r2" in out.rids and out.finish_reasons[out.rids.index("r2")].type == "abort"
    assert len(group.ranks[2].running) == 0 and group.ranks[2].num_used_tokens == 0


def test_prefill_max_requests_caps_each_rank_admission():
    group = _group(dp_size=2, prefill_max_requests=3)
    for i in range(10):
        group.add_request(_req(i))
    group.step()
    assert [len(rank.running) for rank in group.ranks] == [3, 3]


@pytest.mark.parametrize("kwargs, match", [
    (dict(dp_size=2), "enable-dp-attention"),
    (dict(dp_size=0, enable_dp_attention=True), "dp_size"),
    (dict(engine="torch", enable_dp_attention=True), "sim engine"),
    (dict(prefill_max_requests=0), "prefill_max_requests"),
])
def test_config_refuses_bad_dp_settings(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ServerArgs(**kwargs)


def test_per_rank_slots_round_up():
    args = ServerArgs(max_running_requests=10, dp_size=4, enable_dp_attention=True)
    assert args.max_running_requests_per_rank == 3
    assert ServerArgs(max_running_requests=10).max_running_requests_per_rank == 10
