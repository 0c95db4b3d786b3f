"""Decode steps replayed from CUDA graphs, one per (padded batch size, padded KV width).

A graph's inputs live in static buffers; a step copies its inputs in (padding rows write
and read the KV cache's scratch slot) and replays. Graphs are captured on first use.
"""

from __future__ import annotations

import bisect
import logging
from dataclasses import dataclass

import numpy as np
import torch

from reference_impl.engine.torch_engine.attention import AttentionMetadata, HostBatch
from reference_impl.engine.torch_engine.kv_cache import KVCache
from reference_impl.engine.torch_engine.model import LlamaForCausalLM

logger = logging.getLogger("reference_impl.engine.cuda_graph")

_MIN_KV_WIDTH = 256
DEFAULT_MAX_KV_WIDTH = 8192


def graph_batch_sizes(max_bs: int) -> list[int]:
    """1, 2, 4, 8, then every 16 up to ``max_bs`` (and ``max_bs`` itself)."""
    sizes = [bs for bs in (1, 2, 4, 8) if bs < max_bs] + list(range(16, max_bs, 16))
    return sorted({*sizes, max_bs})


@dataclass
class _Graph:
    graph: torch.cuda.CUDAGraph
    input_ids: torch.Tensor  # (bs,) int64
    positions: torch.Tensor  # (bs,) int64
    out_slots: torch.Tensor  # (bs,) int64
    kv_index: torch.Tensor  # (bs, kv_width) int64
    logits: torch.Tensor  # (bs, vocab) float32


class DecodeGraphRunner:
    """Runs decode forwards of up to ``max_bs`` requests and ``max_kv_width`` keys from graphs."""

    def __init__(self, model: LlamaForCausalLM, kv_cache: KVCache, max_bs: int,
                 max_kv_width: int = DEFAULT_MAX_KV_WIDTH):
        self.model = model
        self.kv_cache = kv_cache
        self.batch_sizes = graph_batch_sizes(max_bs)
        self.max_kv_width = max_kv_width
        self._graphs: dict[tuple[int, int], _Graph] = {}
        self._pool = None

    def can_run(self, host: HostBatch) -> bool:
        return (host.is_decode and len(host.q_lens) <= self.batch_sizes[-1]
                and host.kv_index.shape[1] <= self.max_kv_width)

    def run(self, input_ids: torch.Tensor, host: HostBatch) -> torch.Tensor:
        """(bs, vocab) float32 logits; valid until the next ``run``."""
        bs, kv_len = host.kv_index.shape
        padded_bs = self.batch_sizes[bisect.bisect_left(self.batch_sizes, bs)]
        width = max(_MIN_KV_WIDTH, 1 << (kv_len - 1).bit_length())
        g = self._graphs.get((padded_bs, width)) or self._capture(padded_bs, width)
        scratch = self.kv_cache.scratch_slot
        positions = np.zeros(padded_bs, dtype=np.int64)
        positions[:bs] = host.positions
        out_slots = np.full(padded_bs, scratch, dtype=np.int64)
        out_slots[:bs] = host.out_slots
        kv_index = np.full((padded_bs, width), scratch, dtype=np.int64)
        kv_index[:bs, :kv_len] = host.kv_index
        g.input_ids[bs:].zero_()
        g.input_ids[:bs].copy_(input_ids, non_blocking=True)
        for static, array in ((g.positions, positions), (g.out_slots, out_slots), (g.kv_index, kv_index)):
            static.copy_(torch.from_numpy(array).pin_memory(), non_blocking=True)
        g.graph.replay()
        return g.logits[:bs]

    def _capture(self, bs: int, width: int) -> _Graph:
        device = self.kv_cache.k.device
        scratch = self.kv_cache.scratch_slot
        input_ids = torch.zeros(bs, dtype=torch.int64, device=device)
        positions = torch.zeros(bs, dtype=torch.int64, device=device)
        out_slots = torch.full((bs,), scratch, dtype=torch.int64, device=device)
        kv_index = torch.full((bs, width), scratch, dtype=torch.int64, device=device)
        meta = AttentionMetadata(out_slots, kv_index, None, 1, None)
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            for _ in range(2):  # warm-up outside the graph (kernel selection, allocator)
                self.model(input_ids, positions, meta, self.kv_cache)
        torch.cuda.current_stream(device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool):
            logits = self.model(input_ids, positions, meta, self.kv_cache)
        self._pool = graph.pool()
        logger.info("captured a decode CUDA graph for batch size %d, KV width %d", bs, width)
        g = _Graph(graph, input_ids, positions, out_slots, kv_index, logits)
        self._graphs[(bs, width)] = g
        return g
