"""Slot allocator reference counts, the request-to-token table's rows, the prefix cache's
matching and eviction, and the torch engine's flags."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from reference_impl.config import ServerArgs
from reference_impl.engine.torch_engine.kv_cache import PrefixCache, ReqToTokenPool, SlotAllocator


def test_allocator_frees_a_slot_only_at_zero_references():
    alloc = SlotAllocator(8)
    a = alloc.alloc(5)
    assert len(set(a.tolist())) == 5 and alloc.num_free == 3
    alloc.incref(a[:2])
    alloc.decref(a)
    assert alloc.num_free == 6
    alloc.decref(a[:2])
    assert alloc.num_free == 8
    with pytest.raises(MemoryError):
        alloc.alloc(9)


def test_prefix_cache_matches_the_longest_prefix_and_keeps_shared_slots_alive():
    alloc = SlotAllocator(16)
    cache = PrefixCache(alloc, max_entries=4)
    slots = alloc.alloc(6)
    cache.insert(np.array([1, 2, 3, 4, 5, 6]), slots)
    alloc.decref(slots)  # the request is gone; the cache holds the slots
    assert alloc.num_free == 10
    match = cache.match(np.array([1, 2, 3, 9]))
    assert match.tolist() == slots[:3].tolist()
    assert len(cache.match(np.array([7, 8]))) == 0
    alloc.incref(match)  # a request reuses the prefix
    cache.evict_until_free(16)
    assert len(cache) == 0 and alloc.num_free == 13
    alloc.decref(match)
    assert alloc.num_free == 16


def test_prefix_cache_evicts_least_recently_used_beyond_its_size():
    alloc = SlotAllocator(32)
    cache = PrefixCache(alloc, max_entries=2)
    for first in (1, 2, 3):
        slots = alloc.alloc(4)
        cache.insert(np.array([first, 0, 0, 0]), slots)
        alloc.decref(slots)
    assert len(cache) == 2 and alloc.num_free == 24
    assert len(cache.match(np.array([1, 0]))) == 0 and len(cache.match(np.array([3, 0]))) == 2


def test_request_table_rows_hold_slots_and_row_zero_stays_padding():
    pool = ReqToTokenPool(num_rows=2, width=6, scratch_slot=99, device=torch.device("cpu"))
    a = pool.alloc(np.array([5, 3, 8]))
    b = pool.alloc(np.array([1, 2, 4, 6, 7, 9]))
    assert {a, b} == {1, 2}
    assert pool.table[a, :3].tolist() == [5, 3, 8] and pool.table[b].tolist() == [1, 2, 4, 6, 7, 9]
    assert pool.table[0].tolist() == [99] * 6
    with pytest.raises(MemoryError):
        pool.alloc(np.array([0]))
    pool.free(a)
    with pytest.raises(ValueError):
        pool.alloc(np.arange(7))
    assert pool.alloc(np.array([0])) == a


def test_torch_engine_flags_are_validated():
    assert ServerArgs().chunked_prefill_size == 8192 and ServerArgs().cuda_graph_max_bs == 512
    with pytest.raises(ValueError):
        ServerArgs(chunked_prefill_size=0)
    with pytest.raises(ValueError):
        ServerArgs(attention_backend="flash")
