"""Paged attention over the slot pool (page size 1), two backends behind one interface.

Each request owns a row of the device table ``req_to_token`` (its slot per position). A
forward is described by three small per-request vectors, ``req_idx``, ``seq_lens`` (keys after
this forward) and ``extend_lens`` (tokens run now); positions, the slots to write and the
logits rows are derived from them on the device. Decode is the case ``extend_lens == 1``.

- ``TritonBackend``: the Triton kernels of ``triton_attention`` (GPU; CPU under
  ``TRITON_INTERPRET=1``). No gather of keys into a padded batch, no mask tensor.
- ``TorchNativeBackend``: SDPA fallback for the CPU; it gathers each request's keys and
  builds masks of (query block x keys), never (prompt x prompt) for the whole batch.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

ATTENTION_BACKENDS = ("triton", "torch_native")
_QUERY_BLOCK = 1024  # torch fallback: extend queries per SDPA call (bounds the mask's size)


@dataclass
class ForwardMetadata:
    """Where one forward's tokens sit, write their K/V and read keys from."""

    req_to_token: torch.Tensor  # (rows, width) int32: slot of each request row's positions
    req_idx: torch.Tensor  # (batch,) int32: each request's row
    seq_lens: torch.Tensor  # (batch,) int32: keys after this forward
    positions: torch.Tensor  # (num_tokens,) int64
    out_slots: torch.Tensor  # (num_tokens,) int64: where each token's K/V goes
    extend_start: torch.Tensor | None  # (batch,) int32: first query row; None for decode
    extend_lens: torch.Tensor | None  # (batch,) int32; None for decode
    logits_index: torch.Tensor | None  # (batch,) int64: each request's last row; None: all
    max_extend_len: int
    host_seq_lens: np.ndarray | None  # (batch,) for the torch fallback's shapes; None in graphs
    host_extend_lens: np.ndarray | None

    @property
    def is_decode(self) -> bool:
        return self.extend_lens is None


def decode_metadata(req_to_token: torch.Tensor, req_idx: torch.Tensor, seq_lens: torch.Tensor,
                    host_seq_lens: np.ndarray | None = None) -> ForwardMetadata:
    """One token per request, derived on the device (also inside a CUDA graph)."""
    positions = (seq_lens - 1).long()
    out_slots = req_to_token[req_idx.long(), positions].long()
    return ForwardMetadata(req_to_token, req_idx, seq_lens, positions, out_slots, None, None, None,
                           1, host_seq_lens, None)


def extend_metadata(req_to_token: torch.Tensor, req_idx: torch.Tensor, seq_lens: torch.Tensor,
                    extend_lens: torch.Tensor, host_seq_lens: np.ndarray,
                    host_extend_lens: np.ndarray) -> ForwardMetadata:
    """Each request runs its last ``extend_lens`` positions; index tensors built on the device."""
    num_tokens = int(host_extend_lens.sum())
    ends = torch.cumsum(extend_lens, 0, dtype=torch.int32)
    starts = ends - extend_lens
    # position of token t of request i: prefix_len_i + (t - start_i)
    offsets = (seq_lens - extend_lens - starts).long()
    token_req = torch.repeat_interleave(torch.arange(len(host_seq_lens), device=seq_lens.device),
                                        extend_lens.long(), output_size=num_tokens)
    positions = torch.arange(num_tokens, device=seq_lens.device) + offsets[token_req]
    out_slots = req_to_token[req_idx.long()[token_req], positions].long()
    return ForwardMetadata(req_to_token, req_idx, seq_lens, positions, out_slots, starts,
                           extend_lens, (ends - 1).long(), int(host_extend_lens.max()),
                           host_seq_lens, host_extend_lens)


def build_metadata(req_to_token: torch.Tensor, req_idx: np.ndarray, seq_lens: np.ndarray,
                   extend_lens: np.ndarray) -> ForwardMetadata:
    """Host (batch,) vectors → device metadata: one small copy, the rest derived there."""
    host = np.stack([req_idx, seq_lens, extend_lens]).astype(np.int32)  # (3, batch)
    t = torch.from_numpy(host)
    device = req_to_token.device
    t = (t.pin_memory() if device.type == "cuda" else t).to(device, non_blocking=True)
    if (extend_lens == 1).all():
        return decode_metadata(req_to_token, t[0], t[1], host[1])
    return extend_metadata(req_to_token, t[0], t[1], t[2], host[1], host[2])


class AttentionBackend(ABC):
    """Writes a layer's new K/V into the cache, then attends over each request's slots."""

    name: str

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor,
                v_cache: torch.Tensor, meta: ForwardMetadata, scale: float) -> torch.Tensor:
        """q: (tokens, heads, hd); k, v: (tokens, kv_heads, hd); caches (slots + 1, kv_heads, hd);
        → (tokens, heads * hd)."""
        k_cache.index_copy_(0, meta.out_slots, k)
        v_cache.index_copy_(0, meta.out_slots, v)
        attend = self.decode if meta.is_decode else self.extend
        return attend(q, k_cache, v_cache, meta, scale).flatten(1)

    @abstractmethod
    def decode(self, q, k_cache, v_cache, meta: ForwardMetadata, scale: float) -> torch.Tensor:
        """(batch, heads, hd): one query per request at position ``seq_len - 1``."""

    @abstractmethod
    def extend(self, q, k_cache, v_cache, meta: ForwardMetadata, scale: float) -> torch.Tensor:
        """(tokens, heads, hd): each request's queries over its prefix and themselves."""


class TritonBackend(AttentionBackend):
    """The Triton decode (split-KV) and extend kernels; CUDA graph safe."""

    name = "triton"

    def __init__(self, num_kv_splits: int = 16, block_n: int = 64, block_m: int = 64):
        from reference_impl.engine.torch_engine import triton_attention

        self._kernels = triton_attention
        self.num_kv_splits, self.block_n, self.block_m = num_kv_splits, block_n, block_m

    def decode(self, q, k_cache, v_cache, meta, scale):
        return self._kernels.decode_attention(q, k_cache, v_cache, meta.req_to_token, meta.req_idx,
                                              meta.seq_lens, scale, self.num_kv_splits, self.block_n)

    def extend(self, q, k_cache, v_cache, meta, scale):
        return self._kernels.extend_attention(
            q, k_cache, v_cache, meta.req_to_token, meta.req_idx, meta.seq_lens,
            meta.extend_start, meta.extend_lens, meta.max_extend_len, scale, self.block_m,
            self.block_n)


class TorchNativeBackend(AttentionBackend):
    """SDPA over gathered keys: decode batched at the batch's longest KV, extend per request."""

    name = "torch_native"

    def decode(self, q, k_cache, v_cache, meta, scale):
        max_kv = int(meta.host_seq_lens.max())
        slots = meta.req_to_token[meta.req_idx.long(), :max_kv].long()  # (batch, max_kv)
        keys = k_cache[slots].transpose(1, 2)  # (batch, kv_heads, max_kv, hd)
        values = v_cache[slots].transpose(1, 2)
        visible = torch.arange(max_kv, device=q.device) < meta.seq_lens.unsqueeze(1)
        out = F.scaled_dot_product_attention(q.unsqueeze(2), keys, values,
                                             attn_mask=visible[:, None, None, :], scale=scale,
                                             enable_gqa=True)  # (batch, heads, 1, hd)
        return out.squeeze(2)

    def extend(self, q, k_cache, v_cache, meta, scale):
        out = torch.empty_like(q)
        start = 0
        rows = meta.req_idx.tolist()
        for row, seq_len, n in zip(rows, meta.host_seq_lens.tolist(),
                                   meta.host_extend_lens.tolist(), strict=True):
            slots = meta.req_to_token[row, :seq_len].long()
            keys = k_cache[slots].transpose(0, 1)  # (kv_heads, seq_len, hd)
            values = v_cache[slots].transpose(0, 1)
            key_pos = torch.arange(seq_len, device=q.device)
            for b in range(0, n, _QUERY_BLOCK):
                m = min(_QUERY_BLOCK, n - b)
                q_pos = torch.arange(seq_len - n + b, seq_len - n + b + m, device=q.device)
                mask = key_pos.unsqueeze(0) <= q_pos.unsqueeze(1)  # (m, seq_len)
                qb = q[start + b:start + b + m].transpose(0, 1)  # (heads, m, hd)
                ob = F.scaled_dot_product_attention(qb, keys, values, attn_mask=mask, scale=scale,
                                                    enable_gqa=True)
                out[start + b:start + b + m] = ob.transpose(0, 1)
            start += n
        return out


def make_backend(name: str, device: torch.device) -> AttentionBackend:
    """``auto``: Triton on CUDA (when importable), the torch fallback elsewhere."""
    if name == "auto":
        name = "triton" if device.type == "cuda" and _has_triton() else "torch_native"
    if name not in ATTENTION_BACKENDS:
        raise ValueError(f"attention backend must be one of {ATTENTION_BACKENDS}, got {name!r}")
    return TritonBackend() if name == "triton" else TorchNativeBackend()


def _has_triton() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True
