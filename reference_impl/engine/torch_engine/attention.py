"""Paged attention over a slot pool: write the step's K/V into its slots, attend to each
request's own slots only (variable lengths, prefix-cached or not, extend and decode mixed).

Every request's keys are gathered into a padded ``(batch, max_kv)`` layout by slot index;
the causal mask follows from positions (key ``j`` is visible to a query at position ``p``
when ``j <= p``), so a cached prefix and a decode step are the same case.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F


@dataclass
class AttentionMetadata:
    """Where one forward's tokens write their K/V and what each request attends to."""

    out_slots: torch.Tensor  # (num_tokens,) int64: the slot each token's K/V goes to
    kv_index: torch.Tensor  # (batch, max_kv) int64: each request's slots by position, padded
    q_dst: torch.Tensor | None  # (num_tokens,) int64 into (batch * max_q); None: one token each
    max_q: int
    logits_index: torch.Tensor | None  # (batch,) int64: each request's last token; None: all

    @property
    def batch_size(self) -> int:
        return self.kv_index.shape[0]


@dataclass
class HostBatch:
    """A forward's inputs as host numpy arrays, before they go to the device."""

    positions: np.ndarray  # (num_tokens,) int64
    out_slots: np.ndarray  # (num_tokens,) int64
    kv_index: np.ndarray  # (batch, max_kv) int64
    q_lens: np.ndarray  # (batch,) int64

    @property
    def is_decode(self) -> bool:
        return bool((self.q_lens == 1).all())


def build_host_batch(rows: list[tuple[np.ndarray, int, int]], scratch_slot: int,
                     kv_width: int | None = None) -> HostBatch:
    """Host arrays for requests given as ``(slots, start, end)``: positions ``start..end-1`` run
    now, positions ``0..start-1`` are already in the cache, ``slots[p]`` holds position ``p``."""
    q_lens = np.fromiter((end - start for _, start, end in rows), np.int64, len(rows))
    max_kv = kv_width or max(end for _, _, end in rows)
    kv_index = np.full((len(rows), max_kv), scratch_slot, dtype=np.int64)
    positions, out_slots = [], []
    for i, (slots, start, end) in enumerate(rows):
        kv_index[i, :end] = slots[:end]
        positions.append(np.arange(start, end, dtype=np.int64))
        out_slots.append(slots[start:end])
    return HostBatch(np.concatenate(positions), np.concatenate(out_slots).astype(np.int64),
                     kv_index, q_lens)


def to_device_metadata(host: HostBatch, device: torch.device) -> tuple[torch.Tensor, AttentionMetadata]:
    """Positions and metadata on ``device`` (pinned, non-blocking copies on CUDA)."""
    pin = device.type == "cuda"

    def move(a: np.ndarray) -> torch.Tensor:
        t = torch.from_numpy(a)
        return (t.pin_memory() if pin else t).to(device, non_blocking=True)

    if host.is_decode:
        q_dst, max_q, logits_index = None, 1, None
    else:
        max_q = int(host.q_lens.max())
        starts = np.arange(len(host.q_lens), dtype=np.int64) * max_q
        q_dst = move(np.concatenate([s + np.arange(n) for s, n in zip(starts, host.q_lens, strict=True)]))
        logits_index = move(np.cumsum(host.q_lens) - 1)
    meta = AttentionMetadata(move(host.out_slots), move(host.kv_index), q_dst, max_q, logits_index)
    return move(host.positions), meta


def attention_mask(positions: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
    """(batch, 1, max_q, max_kv) bool: key ``j`` visible to a query at position ``p`` iff ``j <= p``."""
    batch, max_kv = meta.kv_index.shape
    if meta.q_dst is None:
        q_pos = positions.view(batch, 1)
    else:
        # NOTE: padding queries sit at position 0 and see key 0: no all-masked (NaN) rows.
        q_pos = positions.new_zeros(batch * meta.max_q).index_copy_(0, meta.q_dst, positions)
        q_pos = q_pos.view(batch, meta.max_q)
    key_pos = torch.arange(max_kv, device=positions.device)
    return (key_pos.view(1, 1, max_kv) <= q_pos.unsqueeze(-1)).unsqueeze(1)


def paged_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor,
                    v_cache: torch.Tensor, meta: AttentionMetadata, mask: torch.Tensor,
                    scale: float) -> torch.Tensor:
    """Write ``k``/``v`` into the layer's cache, attend; (num_tokens, heads * head_dim).

    q: (num_tokens, heads, head_dim); k, v: (num_tokens, kv_heads, head_dim);
    k_cache, v_cache: (num_slots + 1, kv_heads, head_dim).
    """
    num_tokens, num_heads, head_dim = q.shape
    k_cache.index_copy_(0, meta.out_slots, k)
    v_cache.index_copy_(0, meta.out_slots, v)
    batch, max_q = meta.batch_size, meta.max_q
    keys = k_cache[meta.kv_index].transpose(1, 2)  # (batch, kv_heads, max_kv, head_dim)
    values = v_cache[meta.kv_index].transpose(1, 2)
    if meta.q_dst is None:
        q_pad = q.view(batch, 1, num_heads, head_dim)
    else:
        q_pad = q.new_zeros(batch * max_q, num_heads, head_dim).index_copy_(0, meta.q_dst, q)
        q_pad = q_pad.view(batch, max_q, num_heads, head_dim)
    out = F.scaled_dot_product_attention(q_pad.transpose(1, 2), keys, values, attn_mask=mask,
                                         scale=scale, enable_gqa=True)  # (batch, heads, max_q, hd)
    out = out.transpose(1, 2).reshape(batch * max_q, num_heads * head_dim)
    return out if meta.q_dst is None else out[meta.q_dst]
