"""Decode steps replayed from CUDA graphs captured at start-up, one per padded batch size.

A graph reads three static device vectors: the step's tokens, each request's row of the
request-to-token table and its KV length. Positions and the slots to write are derived from
them inside the graph, and the Triton decode kernel's grid does not depend on the KV length,
so one graph per batch size serves every width. A replay copies the new tokens and the two
(batch,) index vectors, nothing else. Padding rows use table row 0 (all scratch slot).
"""

from __future__ import annotations

import bisect
import logging
import time

import numpy as np
import torch

from reference_impl.engine.torch_engine.attention_backend import decode_metadata
from reference_impl.engine.torch_engine.kv_cache import KVCache, ReqToTokenPool
from reference_impl.engine.torch_engine.model import LlamaForCausalLM

logger = logging.getLogger("reference_impl.engine.cuda_graph")


def graph_batch_sizes(max_bs: int) -> list[int]:
    """1, 2, 4, 8, then every 16 up to ``max_bs`` (and ``max_bs`` itself)."""
    sizes = [bs for bs in (1, 2, 4, 8) if bs < max_bs] + list(range(16, max_bs, 16))
    return sorted({*sizes, max_bs})


class DecodeGraphRunner:
    """Runs decode forwards of up to ``max_bs`` requests from graphs captured by ``capture_all``."""

    def __init__(self, model: LlamaForCausalLM, kv_cache: KVCache, req_pool: ReqToTokenPool,
                 max_bs: int):
        self.model = model
        self.kv_cache = kv_cache
        self.req_pool = req_pool
        self.batch_sizes = graph_batch_sizes(max_bs)
        device = kv_cache.k.device
        self.input_ids = torch.zeros(self.max_bs, dtype=torch.int64, device=device)
        # (2, max_bs) int32: row 0 each request's table row, row 1 its KV length after the step
        self.index = torch.ones(2, self.max_bs, dtype=torch.int32, device=device)
        self.index[0].zero_()
        self._host_index = torch.ones(2, self.max_bs, dtype=torch.int32).pin_memory()
        self._host_index[0].zero_()
        self._graphs: dict[int, tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}

    @property
    def max_bs(self) -> int:
        return self.batch_sizes[-1]

    def can_run(self, batch_size: int) -> bool:
        return batch_size <= self.max_bs

    def capture_all(self) -> None:
        """Capture every batch size, largest first (smaller ones reuse its memory pool)."""
        start = time.perf_counter()
        pool = None
        for bs in reversed(self.batch_sizes):
            pool = self._capture(bs, pool)
        logger.info("captured %d decode CUDA graphs (batch 1..%d) in %.1f s",
                    len(self.batch_sizes), self.max_bs, time.perf_counter() - start)

    def run(self, input_ids: torch.Tensor, req_idx: np.ndarray, seq_lens: np.ndarray) -> torch.Tensor:
        """(bs, vocab) float32 logits; valid until the next ``run``."""
        bs = len(req_idx)
        padded_bs = self.batch_sizes[bisect.bisect_left(self.batch_sizes, bs)]
        # NOTE: the previous step ended in a host sync, so the pinned buffer is free to reuse.
        host = self._host_index.numpy()
        host[0, :bs], host[1, :bs] = req_idx, seq_lens
        host[0, bs:padded_bs], host[1, bs:padded_bs] = 0, 1
        self.index[:, :padded_bs].copy_(self._host_index[:, :padded_bs], non_blocking=True)
        self.input_ids[:bs].copy_(input_ids, non_blocking=True)
        graph, logits = self._graphs[padded_bs]
        graph.replay()
        return logits[:bs]

    def _forward(self, bs: int) -> torch.Tensor:
        meta = decode_metadata(self.req_pool.table, self.index[0, :bs], self.index[1, :bs])
        return self.model(self.input_ids[:bs], meta, self.kv_cache)

    def _capture(self, bs: int, pool):
        device = self.input_ids.device
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            for _ in range(2):  # warm-up outside the graph (Triton compiles, allocator settles)
                self._forward(bs)
        torch.cuda.current_stream(device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool):
            logits = self._forward(bs)
        self._graphs[bs] = (graph, logits)
        return graph.pool()
