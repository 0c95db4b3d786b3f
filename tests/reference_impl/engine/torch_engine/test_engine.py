"""The torch engine behind the real scheduler: KV slots come back after 200 requests with
aborts, both token storages (H4) give the same tokens, seeds and stop token ids hold."""

from __future__ import annotations

import random

import pytest

from reference_impl.config import ServerArgs
from reference_impl.messages import SamplingParams, TokenizedGenerateReq
from reference_impl.scheduler.process import build_scheduler


def _scheduler(**overrides):
    args = ServerArgs(engine="torch", device="cpu", max_total_tokens=3000, **overrides)
    return build_scheduler(args)


def _msg(rid: str, ids: list[int], max_new: int, **sampling) -> TokenizedGenerateReq:
    return TokenizedGenerateReq(rid, ids, SamplingParams(max_new_tokens=max_new, **sampling), stream=True)


def _drain(scheduler, abort_after: dict[str, int] | None = None) -> dict[str, list[int]]:
    abort_after = abort_after or {}
    outputs: dict[str, list[int]] = {}
    while not scheduler.is_idle:
        out = scheduler.step()
        assert scheduler.engine.num_free_slots >= 0
        for rid, ids in zip(out.rids, out.new_token_ids, strict=True) if out else ():
            outputs.setdefault(rid, []).extend(ids)
            if rid in abort_after and len(outputs[rid]) >= abort_after.pop(rid):
                scheduler.abort(rid)
    return outputs


def test_every_kv_slot_is_free_after_200_requests_with_aborts():
    scheduler = _scheduler(max_running_requests=24)
    engine = scheduler.engine
    assert scheduler.max_total_tokens == engine.max_total_num_tokens == 3000
    rng = random.Random(0)
    shared = [256, *b"<|system|>\nYou are terse.\n"]
    abort_after = {}
    for i in range(200):
        tail = [rng.randrange(256) for _ in range(rng.randint(1, 60))]
        ids = shared + tail if i % 3 else tail
        scheduler.add_request(_msg(f"r{i}", ids, rng.randint(1, 48), temperature=rng.choice([0, 1.0])))
        if i % 7 == 0:
            abort_after[f"r{i}"] = rng.randint(1, 5)
    aborted = set(abort_after)
    outputs = _drain(scheduler, abort_after)
    assert len(outputs) == 200
    assert not aborted - set(outputs)
    assert engine.num_cached_tokens > 0  # the shared system prompt was found in the cache
    assert scheduler.num_used_tokens == 0 and not engine._reqs
    engine.prefix_cache.clear()
    assert engine.num_free_slots == engine.max_total_num_tokens


def test_list_and_array_storage_generate_the_same_tokens():
    results = []
    for storage in ("list", "array"):
        scheduler = _scheduler(token_storage=storage)
        for i in range(6):
            scheduler.add_request(_msg(f"r{i}", [256, *f"prompt {i} " .encode() * (i + 1)], 24,
                                       temperature=0.9, seed=i))
        results.append(_drain(scheduler))
    assert results[0] == results[1]


def test_seeded_sampling_does_not_depend_on_the_batch():
    alone = _scheduler()
    alone.add_request(_msg("x", [256, *b"seeded"], 32, temperature=1.0, top_p=0.95, seed=5))
    crowd = _scheduler()
    for i in range(5):
        crowd.add_request(_msg(f"other{i}", [256, *b"noise" * (i + 1)], 32, temperature=1.0))
    crowd.add_request(_msg("x", [256, *b"seeded"], 32, temperature=1.0, top_p=0.95, seed=5))
    assert _drain(alone)["x"] == _drain(crowd)["x"]


@pytest.mark.parametrize("temperature", [0, 1.0])
def test_stop_token_ids_end_the_request(temperature):
    probe = _scheduler()
    probe.add_request(_msg("p", [256, *b"stop here"], 16, temperature=temperature, seed=3,
                           ignore_eos=True))
    free_run = _drain(probe)["p"]
    stop_id = free_run[5]
    scheduler = _scheduler()
    scheduler.add_request(_msg("s", [256, *b"stop here"], 16, temperature=temperature, seed=3,
                               ignore_eos=True, stop_token_ids=(stop_id,)))
    stopped = _drain(scheduler)["s"]
    assert stopped == free_run[:free_run.index(stop_id) + 1]
