"""The torch engine: a Llama-family model over a paged KV cache, behind the Engine interface.

A request gets its KV slots on its first forward (admission: prompt + max_new_tokens, the
same reservation the scheduler budgets for, minus a prefix found in the prefix cache) and
gives them back on release, when its written tokens go to the prefix cache.
"""

from __future__ import annotations

import logging
import os
import random
import resource
from array import array
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from reference_impl.config import ServerArgs
from reference_impl.engine.base import Engine, ForwardBatch
from reference_impl.engine.torch_engine.attention import (
    HostBatch,
    build_host_batch,
    to_device_metadata,
)
from reference_impl.engine.torch_engine.cuda_graph import DecodeGraphRunner
from reference_impl.engine.torch_engine.kv_cache import KVCache, PrefixCache, SlotAllocator
from reference_impl.engine.torch_engine.sampling import SamplingBatch, request_rng, sample
from reference_impl.engine.torch_engine.weights import load_model
from reference_impl.scheduler.request import Req
from reference_impl.scheduler.token_storage import TokenStorage
from reference_impl.tokenizer import Tokenizer

logger = logging.getLogger("reference_impl.engine.torch")

CPU_DEFAULT_KV_TOKENS = 1 << 17
CUDA_DEFAULT_MEM_FRACTION = 0.6
_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def resolve_device(name: str) -> torch.device:
    """``auto`` is CUDA when available, else the CPU."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda, but torch sees no CUDA device")
    return torch.device(name)


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    """``auto`` is bfloat16 on CUDA and float32 on the CPU."""
    if name == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return _DTYPES[name]


@dataclass
class _ReqState:
    slots: np.ndarray  # (prompt + max_new_tokens,) int64: the slot of each position
    num_cached: int  # prompt tokens found in the prefix cache
    num_written: int  # positions 0..num_written-1 have their K/V in the cache
    rng: random.Random


class TorchEngine(Engine):
    """Runs the model for the scheduler's batches; one sampled token per request."""

    def __init__(self, args: ServerArgs, tokenizer: Tokenizer, storage: TokenStorage):
        self.device = resolve_device(args.device)
        self.dtype = resolve_dtype(args.dtype, self.device)
        self.model = load_model(args.model_path, self.device, self.dtype)
        self.config = self.model.config
        if tokenizer.eos_token_id is not None and tokenizer.eos_token_id >= self.config.vocab_size:
            raise ValueError(f"the tokenizer's EOS id {tokenizer.eos_token_id} is outside the "
                             f"model's vocabulary ({self.config.vocab_size}); pass --tokenizer-path")
        num_slots = kv_pool_tokens(args, self.model, self.dtype, self.device)
        self.kv_cache = KVCache(self.config, num_slots, self.dtype, self.device)
        self.allocator = SlotAllocator(num_slots)
        self.prefix_cache = PrefixCache(self.allocator)
        self.max_total_num_tokens = num_slots
        self.num_cached_tokens = 0
        self._storage = storage
        self._reqs: dict[str, _ReqState] = {}
        self._graphs = None
        if self.device.type == "cuda" and not args.disable_cuda_graph:
            self._graphs = DecodeGraphRunner(self.model, self.kv_cache, args.cuda_graph_max_bs)
        logger.info("%s", self.memory_report())

    def forward(self, batch: ForwardBatch) -> list[int]:
        logits = self.compute_logits(batch.reqs)
        params = [r.sampling for r in batch.reqs]
        rngs = [self._reqs[r.rid].rng for r in batch.reqs]
        sampling = SamplingBatch.build(params, rngs, self.config.vocab_size, self.device)
        return sample(logits, sampling).tolist()

    def compute_logits(self, reqs: Sequence[Req]) -> torch.Tensor:
        """Run new requests' prompts (past any cached prefix) and running requests' last
        tokens in one forward; (batch, vocab) float32 logits of each request's next token."""
        rows, parts = [], []
        for req in reqs:
            state = self._reqs.get(req.rid)
            if state is None:
                state = self._admit(req)
                start = state.num_cached
                parts.append(req.fill_ids[start:] if start else req.fill_ids)
            else:
                start = req.seq_len - 1
                parts.append(req.output_ids[-1:])
            end = start + len(parts[-1])
            rows.append((state.slots, start, end))
            state.num_written = end
        # (num_tokens,) int64 through the H4 path: pinned and non-blocking on CUDA
        input_ids = self._storage.to_tensor(parts, self.device)
        host = build_host_batch(rows, self.kv_cache.scratch_slot)
        return self._run(input_ids, host)

    def release(self, req: Req) -> None:
        state = self._reqs.pop(req.rid, None)
        if state is None:
            return
        written = state.num_written
        ids = np.concatenate([_as_int64(req.origin_input_ids), _as_int64(req.output_ids)])[:written]
        self.prefix_cache.insert(ids, state.slots[:written])
        self.allocator.decref(state.slots)

    @property
    def num_free_slots(self) -> int:
        """Slots neither held by a request nor by the prefix cache."""
        return self.allocator.num_free

    def memory_report(self) -> str:
        """Model, parameter and KV bytes, and the peak memory so far, in one line."""
        param_bytes = sum(p.nbytes for p in self.model.parameters())
        if self.device.type == "cuda":
            peak = f"peak CUDA memory allocated {torch.cuda.max_memory_allocated(self.device) / 2**20:.1f} MiB"
        else:
            peak = f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.1f} MiB"
        per_token = KVCache.bytes_per_token(self.config, self.dtype)
        return (f"torch engine on {self.device} in {str(self.dtype).removeprefix('torch.')}: "
                f"params {param_bytes / 2**20:.1f} MiB, KV cache {self.kv_cache.nbytes / 2**20:.1f} MiB "
                f"({self.max_total_num_tokens} tokens x {per_token} B), {peak}, "
                f"CUDA graphs {'on' if self._graphs else 'off'}")

    def _admit(self, req: Req) -> _ReqState:
        prompt = _as_int64(req.fill_ids)
        cached = self.prefix_cache.match(prompt[:-1]) if len(prompt) > 1 else prompt[:0]
        self.allocator.incref(cached)  # before any eviction, which may drop the entry's own ref
        num_new = req.num_reserved_tokens - len(cached)
        self.prefix_cache.evict_until_free(num_new)
        slots = np.concatenate([cached, self.allocator.alloc(num_new)])
        self.num_cached_tokens += len(cached)
        state = _ReqState(slots, len(cached), 0, request_rng(req.sampling, req.choice_index))
        self._reqs[req.rid] = state
        return state

    def _run(self, input_ids: torch.Tensor, host: HostBatch) -> torch.Tensor:
        if self._graphs is not None and self._graphs.can_run(host):
            return self._graphs.run(input_ids, host)
        positions, meta = to_device_metadata(host, self.device)
        return self.model(input_ids, positions, meta, self.kv_cache)


def kv_pool_tokens(args: ServerArgs, model: torch.nn.Module, dtype: torch.dtype,
                   device: torch.device) -> int:
    """KV slots: ``--max-total-tokens``, else a memory fraction, else the CPU default."""
    if args.max_total_tokens:
        return args.max_total_tokens
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        budget = free - total * (1 - (args.mem_fraction_static or CUDA_DEFAULT_MEM_FRACTION))
    elif args.mem_fraction_static:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        budget = total * args.mem_fraction_static - sum(p.nbytes for p in model.parameters())
    else:
        return CPU_DEFAULT_KV_TOKENS
    num_tokens = int(budget // KVCache.bytes_per_token(model.config, dtype))
    if num_tokens <= 0:
        raise ValueError("no memory left for the KV cache: raise --mem-fraction-static "
                         "or set --max-total-tokens")
    return num_tokens


def _as_int64(ids) -> np.ndarray:
    if isinstance(ids, array):
        return np.frombuffer(ids, dtype=np.int64) if len(ids) else np.empty(0, dtype=np.int64)
    return np.asarray(ids, dtype=np.int64)
