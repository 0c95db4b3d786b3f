"""The paged KV cache: fixed-shape K/V buffers over a pool of token slots, the device
request-to-token table, the slot allocator (reference counts, so cached prefixes can be
shared), and the prefix cache.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import torch

from reference_impl.engine.torch_engine.model_config import ModelConfig


class KVCache:
    """K and V buffers of shape (layers, num_slots + 1, kv_heads, head_dim).

    NOTE: slot ``num_slots`` is a scratch slot: padding reads it and padded rows write it.
    """

    def __init__(self, config: ModelConfig, num_slots: int, dtype: torch.dtype,
                 device: torch.device):
        shape = (config.num_hidden_layers, num_slots + 1, config.num_key_value_heads,
                 config.head_dim)
        # zeros, not empty: a masked key with NaN garbage would still poison softmax @ V
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.num_slots = num_slots

    @property
    def scratch_slot(self) -> int:
        return self.num_slots

    @property
    def nbytes(self) -> int:
        return self.k.nbytes + self.v.nbytes

    @staticmethod
    def bytes_per_token(config: ModelConfig, dtype: torch.dtype) -> int:
        """K and V bytes one token takes over all layers."""
        itemsize = torch.empty(0, dtype=dtype).element_size()
        return 2 * config.num_hidden_layers * config.num_key_value_heads * config.head_dim * itemsize


class ReqToTokenPool:
    """A device table (rows, width) int32: row ``r`` holds the slot of each position of the
    request that owns it. Written once per request at admission; kernels read it directly.

    NOTE: row 0 is the padding row (every entry the scratch slot), for CUDA graph padding.
    """

    def __init__(self, num_rows: int, width: int, scratch_slot: int, device: torch.device):
        self.table = torch.full((num_rows + 1, width), scratch_slot, dtype=torch.int32,
                                device=device)
        self._free = list(range(num_rows, 0, -1))

    @property
    def width(self) -> int:
        return self.table.shape[1]

    @property
    def nbytes(self) -> int:
        return self.table.nbytes

    def alloc(self, slots: np.ndarray) -> int:
        """A free row holding ``slots`` (one host-to-device copy); MemoryError if none is free."""
        if not self._free:
            raise MemoryError("request table full: more running requests than its rows")
        if len(slots) > self.width:
            raise ValueError(f"request of {len(slots)} tokens exceeds the table width {self.width}")
        row = self._free.pop()
        src = torch.from_numpy(slots.astype(np.int32))
        self.table[row, :len(slots)].copy_(src, non_blocking=False)
        return row

    def free(self, row: int) -> None:
        self._free.append(row)


class SlotAllocator:
    """A free stack of slot ids with reference counts; a slot is free at count zero."""

    def __init__(self, num_slots: int):
        self.num_slots = num_slots
        self._free = np.arange(num_slots - 1, -1, -1, dtype=np.int64)
        self._num_free = num_slots
        self._refs = np.zeros(num_slots, dtype=np.int32)

    @property
    def num_free(self) -> int:
        return self._num_free

    def alloc(self, n: int) -> np.ndarray:
        """``n`` free slots, each with one reference; raises MemoryError if there are fewer."""
        if n > self._num_free:
            raise MemoryError(f"KV pool exhausted: {n} slots asked, {self._num_free} free")
        self._num_free -= n
        slots = self._free[self._num_free:self._num_free + n][::-1].copy()
        self._refs[slots] = 1
        return slots

    def incref(self, slots: np.ndarray) -> None:
        self._refs[slots] += 1

    def decref(self, slots: np.ndarray) -> None:
        """Drop one reference from each slot (no duplicates); free those at zero."""
        self._refs[slots] -= 1
        freed = slots[self._refs[slots] == 0]
        self._free[self._num_free:self._num_free + len(freed)] = freed
        self._num_free += len(freed)


class PrefixCache:
    """Finished requests' token ids and the slots holding their KV, least recently used first.

    ``match`` finds the longest common prefix with any entry; each entry holds one reference
    on its slots, so a request reusing them keeps them alive after eviction.
    """

    def __init__(self, allocator: SlotAllocator, max_entries: int = 64):
        self._allocator = allocator
        self._max_entries = max_entries
        self._entries: OrderedDict[int, tuple[np.ndarray, np.ndarray]] = OrderedDict()
        self._next_key = 0

    def __len__(self) -> int:
        return len(self._entries)

    def match(self, ids: np.ndarray) -> np.ndarray:
        """The slots of the longest cached prefix of ``ids`` (possibly empty)."""
        best_key, best_len = None, 0
        for key, (cached_ids, _) in self._entries.items():
            n = min(len(cached_ids), len(ids))
            if n <= best_len:
                continue
            same = cached_ids[:n] == ids[:n]
            length = n if same.all() else int(same.argmin())
            if length > best_len:
                best_key, best_len = key, length
        if best_key is None:
            return np.empty(0, dtype=np.int64)
        self._entries.move_to_end(best_key)
        return self._entries[best_key][1][:best_len]

    def insert(self, ids: np.ndarray, slots: np.ndarray) -> None:
        """Cache ``ids`` whose KV lies in ``slots`` (same length); takes a reference."""
        if len(ids) == 0:
            return
        self._allocator.incref(slots)
        self._entries[self._next_key] = (ids, slots)
        self._next_key += 1
        while len(self._entries) > self._max_entries:
            self._evict_one()

    def evict_until_free(self, num_slots: int) -> None:
        """Evict least recently used entries until ``num_slots`` slots are free (or none left)."""
        while self._allocator.num_free < num_slots and self._entries:
            self._evict_one()

    def clear(self) -> None:
        while self._entries:
            self._evict_one()

    def _evict_one(self) -> None:
        _, (_, slots) = self._entries.popitem(last=False)
        self._allocator.decref(slots)
