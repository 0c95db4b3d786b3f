"""Slot allocator reference counts and the prefix cache's matching and eviction."""

from __future__ import annotations

import numpy as np
import pytest

from reference_impl.engine.torch_engine.kv_cache import PrefixCache, SlotAllocator


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
