"""Triton paged-attention kernels over the slot pool (page size 1), after SGLang's Triton
backend: each request's slots are a row of the device ``req_to_token`` table.

- decode: split-KV flash decoding. Stage 1 runs one program per (request, KV head, split) over
  the GQA group's query heads at once; stage 2 merges the splits by their log-sum-exp. The grid
  does not depend on the KV length, so one CUDA graph serves every width.
- extend: one program per (request, query head, block of queries); keys come from the cache
  (this forward's K/V are written there first), so a cached prefix needs no special case and
  the causal mask is computed from positions, never materialised.

Under ``TRITON_INTERPRET=1`` the same kernels run on CPU tensors (the tests do so).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _decode_stage1(Q, K, V, ReqToToken, ReqIdx, SeqLens, MidO, MidLse, sm_scale,
                   stride_qb, stride_qh, stride_ks, stride_kh, stride_vs, stride_vh, stride_rt,
                   stride_mb, stride_mh, stride_ms,
                   KV_GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
                   BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr, NUM_SPLITS: tl.constexpr,
                   PRECISION: tl.constexpr):
    b = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    offs_h = tl.arange(0, BLOCK_H)
    offs_d = tl.arange(0, BLOCK_D)
    mask_h = offs_h < KV_GROUP
    mask_d = offs_d < HEAD_DIM
    heads = kv_head * KV_GROUP + offs_h
    seq_len = tl.load(SeqLens + b)
    req = tl.load(ReqIdx + b).to(tl.int64)
    split_len = tl.cdiv(seq_len, NUM_SPLITS)
    start = split * split_len
    end = tl.minimum(start + split_len, seq_len)
    if start < end:
        q = tl.load(Q + b * stride_qb + heads[:, None] * stride_qh + offs_d[None, :],
                    mask=mask_h[:, None] & mask_d[None, :], other=0.0)  # (BLOCK_H, BLOCK_D)
        m = tl.full([BLOCK_H], float("-inf"), tl.float32)
        denom = tl.zeros([BLOCK_H], tl.float32)
        acc = tl.zeros([BLOCK_H, BLOCK_D], tl.float32)
        for n0 in range(start, end, BLOCK_N):
            offs_n = n0 + tl.arange(0, BLOCK_N)
            mask_n = offs_n < end
            slots = tl.load(ReqToToken + req * stride_rt + offs_n, mask=mask_n, other=0).to(tl.int64)
            kv_mask = mask_n[:, None] & mask_d[None, :]
            k = tl.load(K + slots[:, None] * stride_ks + kv_head * stride_kh + offs_d[None, :],
                        mask=kv_mask, other=0.0)  # (BLOCK_N, BLOCK_D)
            qk = tl.dot(q, tl.trans(k), input_precision=PRECISION) * sm_scale  # (BLOCK_H, BLOCK_N)
            qk = tl.where(mask_n[None, :], qk, float("-inf"))
            m_new = tl.maximum(m, tl.max(qk, 1))
            alpha = tl.exp(m - m_new)
            p = tl.exp(qk - m_new[:, None])
            denom = denom * alpha + tl.sum(p, 1)
            v = tl.load(V + slots[:, None] * stride_vs + kv_head * stride_vh + offs_d[None, :],
                        mask=kv_mask, other=0.0)
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
            m = m_new
        mid = b * stride_mb + heads * stride_mh + split * stride_ms
        tl.store(MidO + mid[:, None] + offs_d[None, :], acc / denom[:, None],
                 mask=mask_h[:, None] & mask_d[None, :])
        tl.store(MidLse + mid // BLOCK_D, m + tl.log(denom), mask=mask_h)


@triton.jit
def _decode_stage2(MidO, MidLse, Out, SeqLens, stride_mb, stride_mh, stride_ms, stride_ob, stride_oh,
                   HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, NUM_SPLITS: tl.constexpr):
    b = tl.program_id(0)
    head = tl.program_id(1)
    offs_d = tl.arange(0, BLOCK_D)
    seq_len = tl.load(SeqLens + b)
    split_len = tl.cdiv(seq_len, NUM_SPLITS)
    # m and denom are kept per lane (all lanes equal) so every loop-carried value is a tensor
    m = tl.full([BLOCK_D], float("-inf"), tl.float32)
    denom = tl.zeros([BLOCK_D], tl.float32)
    acc = tl.zeros([BLOCK_D], tl.float32)
    for split in range(NUM_SPLITS):
        if split * split_len < seq_len:
            mid = b * stride_mb + head * stride_mh + split * stride_ms
            lse = tl.load(MidLse + mid // BLOCK_D)
            o = tl.load(MidO + mid + offs_d)
            m_new = tl.maximum(m, lse)
            alpha = tl.exp(m - m_new)
            w = tl.exp(lse - m_new)
            acc = acc * alpha + w * o
            denom = denom * alpha + w
            m = m_new
    tl.store(Out + b * stride_ob + head * stride_oh + offs_d, (acc / denom).to(Out.dtype.element_ty),
             mask=offs_d < HEAD_DIM)


@triton.jit
def _extend_kernel(Q, K, V, Out, ReqToToken, ReqIdx, SeqLens, ExtStart, ExtLens, sm_scale,
                   stride_qt, stride_qh, stride_ks, stride_kh, stride_vs, stride_vh,
                   stride_ot, stride_oh, stride_rt,
                   KV_GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, PRECISION: tl.constexpr):
    b = tl.program_id(0)
    head = tl.program_id(1)
    block_m = tl.program_id(2)
    ext_len = tl.load(ExtLens + b)
    if block_m * BLOCK_M < ext_len:
        seq_len = tl.load(SeqLens + b)
        prefix_len = seq_len - ext_len
        q_start = tl.load(ExtStart + b).to(tl.int64)
        req = tl.load(ReqIdx + b).to(tl.int64)
        kv_head = head // KV_GROUP
        offs_m = block_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_d = tl.arange(0, BLOCK_D)
        mask_m = offs_m < ext_len
        mask_d = offs_d < HEAD_DIM
        q = tl.load(Q + (q_start + offs_m)[:, None] * stride_qt + head * stride_qh + offs_d[None, :],
                    mask=mask_m[:, None] & mask_d[None, :], other=0.0)  # (BLOCK_M, BLOCK_D)
        q_pos = prefix_len + offs_m
        m = tl.full([BLOCK_M], float("-inf"), tl.float32)
        denom = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
        end = tl.minimum(seq_len, prefix_len + (block_m + 1) * BLOCK_M)
        for n0 in range(0, end, BLOCK_N):
            offs_n = n0 + tl.arange(0, BLOCK_N)
            mask_n = offs_n < end
            slots = tl.load(ReqToToken + req * stride_rt + offs_n, mask=mask_n, other=0).to(tl.int64)
            kv_mask = mask_n[:, None] & mask_d[None, :]
            k = tl.load(K + slots[:, None] * stride_ks + kv_head * stride_kh + offs_d[None, :],
                        mask=kv_mask, other=0.0)
            qk = tl.dot(q, tl.trans(k), input_precision=PRECISION) * sm_scale  # (BLOCK_M, BLOCK_N)
            # NOTE: key 0 is visible to every query, so no row is all -inf after the first block.
            visible = mask_n[None, :] & (offs_n[None, :] <= q_pos[:, None])
            qk = tl.where(visible, qk, float("-inf"))
            m_new = tl.maximum(m, tl.max(qk, 1))
            alpha = tl.exp(m - m_new)
            p = tl.exp(qk - m_new[:, None])
            denom = denom * alpha + tl.sum(p, 1)
            v = tl.load(V + slots[:, None] * stride_vs + kv_head * stride_vh + offs_d[None, :],
                        mask=kv_mask, other=0.0)
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
            m = m_new
        out = acc / denom[:, None]
        tl.store(Out + (q_start + offs_m)[:, None] * stride_ot + head * stride_oh + offs_d[None, :],
                 out.to(Out.dtype.element_ty), mask=mask_m[:, None] & mask_d[None, :])


def _precision(dtype: torch.dtype) -> str:
    # float32 models get IEEE dots (parity with the reference); 16-bit inputs ignore this.
    return "ieee" if dtype == torch.float32 else "tf32"


def _block_d(head_dim: int) -> int:
    return max(16, triton.next_power_of_2(head_dim))


def decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                     req_to_token: torch.Tensor, req_idx: torch.Tensor, seq_lens: torch.Tensor,
                     scale: float, num_splits: int = 16, block_n: int = 64) -> torch.Tensor:
    """One query token per request; (batch, heads, head_dim) like ``q``.

    q: (batch, heads, head_dim); k_cache, v_cache: (slots, kv_heads, head_dim);
    req_to_token: (rows, width) int32; req_idx, seq_lens: (batch,) int32 (keys 0..seq_len-1).
    """
    batch, num_heads, head_dim = q.shape
    num_kv_heads = k_cache.shape[1]
    group = num_heads // num_kv_heads
    block_d = _block_d(head_dim)
    # (batch, heads, splits, block_d) float32 partial outputs and (batch, heads, splits) their
    # log-sum-exps; NOTE: both contiguous, so a mid_o offset // block_d is the mid_lse offset.
    mid_o = torch.empty(batch, num_heads, num_splits, block_d, dtype=torch.float32, device=q.device)
    mid_lse = torch.empty(batch, num_heads, num_splits, dtype=torch.float32, device=q.device)
    _decode_stage1[(batch, num_kv_heads, num_splits)](
        q, k_cache, v_cache, req_to_token, req_idx, seq_lens, mid_o, mid_lse, scale,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), v_cache.stride(0),
        v_cache.stride(1), req_to_token.stride(0), mid_o.stride(0), mid_o.stride(1), mid_o.stride(2),
        KV_GROUP=group, HEAD_DIM=head_dim, BLOCK_D=block_d, BLOCK_H=max(16, triton.next_power_of_2(group)),
        BLOCK_N=block_n, NUM_SPLITS=num_splits, PRECISION=_precision(q.dtype), num_warps=4)
    out = torch.empty_like(q)
    _decode_stage2[(batch, num_heads)](
        mid_o, mid_lse, out, seq_lens, mid_o.stride(0), mid_o.stride(1), mid_o.stride(2),
        out.stride(0), out.stride(1), HEAD_DIM=head_dim, BLOCK_D=block_d, NUM_SPLITS=num_splits,
        num_warps=2)
    return out


def extend_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                     req_to_token: torch.Tensor, req_idx: torch.Tensor, seq_lens: torch.Tensor,
                     extend_start: torch.Tensor, extend_lens: torch.Tensor, max_extend_len: int,
                     scale: float, block_m: int = 64, block_n: int = 64) -> torch.Tensor:
    """Many query tokens per request, each request's queries contiguous from ``extend_start``;
    its queries are its last ``extend_lens`` positions of ``seq_lens``; (tokens, heads, head_dim).
    """
    num_tokens, num_heads, head_dim = q.shape
    out = torch.empty_like(q)
    grid = (req_idx.shape[0], num_heads, triton.cdiv(max_extend_len, block_m))
    _extend_kernel[grid](
        q, k_cache, v_cache, out, req_to_token, req_idx, seq_lens, extend_start, extend_lens, scale,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), v_cache.stride(0),
        v_cache.stride(1), out.stride(0), out.stride(1), req_to_token.stride(0),
        KV_GROUP=num_heads // k_cache.shape[1], HEAD_DIM=head_dim, BLOCK_D=_block_d(head_dim),
        BLOCK_M=block_m, BLOCK_N=block_n, PRECISION=_precision(q.dtype), num_warps=4)
    return out
