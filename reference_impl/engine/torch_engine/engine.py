"""The torch engine: a Llama-family model over a paged KV cache, behind the Engine interface.

A request gets its KV slots and a row of the device request-to-token table on its first
forward (admission: prompt + max_new_tokens, the same reservation the scheduler budgets for,
minus a prefix found in the prefix cache) and gives them back on release, when its written
tokens go to the prefix cache. Prompts run in forwards of at most ``--chunked-prefill-size``
tokens; decode batches replay CUDA graphs captured at start-up.
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
from reference_impl.engine.torch_engine.attention_backend import build_metadata, make_backend
from reference_impl.engine.torch_engine.chunked_prefill import Piece, split_into_forwards
from reference_impl.engine.torch_engine.cuda_graph import DecodeGraphRunner
from reference_impl.engine.torch_engine.kv_cache import (
    KVCache,
    PrefixCache,
    ReqToTokenPool,
    SlotAllocator,
)
from reference_impl.engine.torch_engine.sampling import (
    SamplingBatch,
    blocked_ids_mask,
    request_rng,
    sample,
)
from reference_impl.engine.torch_engine.weights import load_model
from reference_impl.scheduler.request import Req
from reference_impl.scheduler.token_storage import TokenStorage
from reference_impl.tokenizer import Tokenizer

logger = logging.getLogger("reference_impl.engine.torch")

CPU_DEFAULT_KV_TOKENS = 1 << 17
CUDA_DEFAULT_MEM_FRACTION = 0.85
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
    row: int  # its row of the request-to-token table (holding ``slots``)
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
        self._blocked_ids = blocked_ids_mask(tokenizer, self.config.vocab_size, self.device)
        self.model.attn_backend = make_backend(args.attention_backend, self.device)
        num_slots = kv_pool_tokens(args, self.model, self.dtype, self.device)
        self.kv_cache = KVCache(self.config, num_slots, self.dtype, self.device)
        self.req_pool = ReqToTokenPool(min(args.max_running_requests, num_slots),
                                       min(args.context_length, num_slots),
                                       self.kv_cache.scratch_slot, self.device)
        self.chunked_prefill_size = args.chunked_prefill_size
        self.allocator = SlotAllocator(num_slots)
        self.prefix_cache = PrefixCache(self.allocator)
        self.max_total_num_tokens = num_slots
        self.num_cached_tokens = 0
        self._storage = storage
        self._reqs: dict[str, _ReqState] = {}
        self._graphs = None
        if (self.device.type == "cuda" and not args.disable_cuda_graph
                and self.model.attn_backend.name == "triton"):
            self._graphs = DecodeGraphRunner(self.model, self.kv_cache, self.req_pool,
                                             args.cuda_graph_max_bs)
            self._graphs.capture_all()
        logger.info("KV cache: %d tokens fit; %s", num_slots, self.memory_report())

    @torch.inference_mode()
    def forward(self, batch: ForwardBatch) -> list[int]:
        logits = self.compute_logits(batch.reqs)
        if self._blocked_ids is not None:
            logits.masked_fill_(self._blocked_ids, float("-inf"))
        params = [r.sampling for r in batch.reqs]
        rngs = [self._reqs[r.rid].rng for r in batch.reqs]
        sampling = SamplingBatch.build(params, rngs, self.config.vocab_size, self.device)
        return sample(logits, sampling).tolist()

    def compute_logits(self, reqs: Sequence[Req]) -> torch.Tensor:
        """Run new requests' prompts (past any cached prefix) and running requests' last
        tokens, in forwards of at most ``chunked_prefill_size`` tokens; (batch, vocab) float32
        logits of each request's next token."""
        pieces = []
        for req in reqs:
            state = self._reqs.get(req.rid)
            if state is None:
                state = self._admit(req)
                start = state.num_cached
                ids = req.fill_ids[start:] if start else req.fill_ids
            else:
                start = req.seq_len - 1
                ids = req.output_ids[-1:]
            state.num_written = start + len(ids)
            pieces.append(Piece(state.row, start, state.num_written, ids, True))
        if sum(p.end - p.start for p in pieces) <= self.chunked_prefill_size:
            return self._run(pieces)
        outputs = []
        for forward in split_into_forwards(pieces, self.chunked_prefill_size):
            logits = self._run(forward)
            wanted = [i for i, p in enumerate(forward) if p.is_last]
            if wanted:
                outputs.append(logits[torch.tensor(wanted, device=logits.device)])
        return torch.cat(outputs)

    def release(self, req: Req) -> None:
        state = self._reqs.pop(req.rid, None)
        if state is None:
            return
        written = state.num_written
        ids = np.concatenate([_as_int64(req.origin_input_ids), _as_int64(req.output_ids)])[:written]
        self.prefix_cache.insert(ids, state.slots[:written])
        self.allocator.decref(state.slots)
        self.req_pool.free(state.row)

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
                f"({self.max_total_num_tokens} tokens x {per_token} B), request table "
                f"{self.req_pool.nbytes / 2**20:.1f} MiB, attention {self.model.attn_backend.name}, "
                f"chunked prefill {self.chunked_prefill_size}, {peak}, CUDA graphs "
                f"{f'up to batch {self._graphs.max_bs}' if self._graphs else 'off'}")

    def _admit(self, req: Req) -> _ReqState:
        prompt = _as_int64(req.fill_ids)
        cached = self.prefix_cache.match(prompt[:-1]) if len(prompt) > 1 else prompt[:0]
        self.allocator.incref(cached)  # before any eviction, which may drop the entry's own ref
        num_new = req.num_reserved_tokens - len(cached)
        self.prefix_cache.evict_until_free(num_new)
        slots = np.concatenate([cached, self.allocator.alloc(num_new)])
        try:
            row = self.req_pool.alloc(slots)
        except (MemoryError, ValueError):
            self.allocator.decref(slots)
            raise
        self.num_cached_tokens += len(cached)
        state = _ReqState(slots, row, len(cached), 0, request_rng(req.sampling, req.choice_index))
        self._reqs[req.rid] = state
        return state

    def _run(self, forward: list[Piece]) -> torch.Tensor:
        """One forward; (len(forward), vocab) float32 logits of each piece's last token."""
        # (num_tokens,) int64 through the H4 path: pinned and non-blocking on CUDA
        input_ids = self._storage.to_tensor([p.ids for p in forward], self.device)
        n = len(forward)
        req_idx = np.fromiter((p.row for p in forward), np.int32, n)
        seq_lens = np.fromiter((p.end for p in forward), np.int32, n)
        if self._graphs is not None and len(input_ids) == n and self._graphs.can_run(n):
            return self._graphs.run(input_ids, req_idx, seq_lens)
        extend_lens = np.fromiter((p.end - p.start for p in forward), np.int32, n)
        meta = build_metadata(self.req_pool.table, req_idx, seq_lens, extend_lens)
        return self.model(input_ids, meta, self.kv_cache)


def kv_pool_tokens(args: ServerArgs, model: torch.nn.Module, dtype: torch.dtype,
                   device: torch.device) -> int:
    """KV slots: ``--max-total-tokens``, else a memory fraction, else the CPU default."""
    if args.max_total_tokens:
        return args.max_total_tokens
    if device.type == "cuda":
        torch.cuda.empty_cache()  # what loading left in the caching allocator counts as free
        free, total = torch.cuda.mem_get_info(device)
        table_bytes = 4 * args.max_running_requests * args.context_length  # the req_to_token table
        fraction = args.mem_fraction_static or CUDA_DEFAULT_MEM_FRACTION
        budget = free - total * (1 - fraction) - table_bytes
        logger.info("KV pool budget: %.2f GiB (%.2f GiB free of %.2f GiB, fraction %.2f)",
                    budget / 2**30, free / 2**30, total / 2**30, fraction)
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
