"""Both attention backends against an SDPA reference on dense per-request K/V: decode, extend,
extend over a cached prefix, GQA, a head_dim that is not a power of two. The Triton kernels
run on CPU tensors under ``TRITON_INTERPRET=1`` (skipped when triton is not importable), and
they are compiled for an H100 (sm_90) here, without a GPU."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from reference_impl.engine.torch_engine.attention_backend import (
    TorchNativeBackend,
    build_metadata,
)
from tests.reference_impl.engine.torch_engine.helpers import triton_device

NUM_SLOTS = 400
SCALE = 0.3


def _triton_backend():
    device = triton_device()
    from reference_impl.engine.torch_engine.attention_backend import TritonBackend

    return TritonBackend(num_kv_splits=4, block_n=16, block_m=16), device


BACKENDS = {"torch_native": lambda: (TorchNativeBackend(), torch.device("cpu")),
            "triton": _triton_backend}
SHAPES = [(8, 2, 32), (6, 2, 24), (4, 4, 16)]  # (heads, kv_heads, head_dim): GQA 4, 3, none
CASES = {
    "decode": [(0, 1), (6, 1), (32, 1), (49, 1), (130, 1)],  # (cached prefix, tokens run now)
    "extend": [(0, 17), (0, 1), (0, 40)],
    "prefix": [(9, 5), (0, 23), (30, 1), (3, 40), (64, 70)],
}


def _reference(q, keys, values, prefix_len):
    """q: (n, heads, hd); keys/values: (seq_len, kv_heads, hd) → (n, heads, hd)."""
    n, seq_len = q.shape[0], keys.shape[0]
    mask = torch.arange(seq_len).unsqueeze(0) <= torch.arange(prefix_len, prefix_len + n).unsqueeze(1)
    out = F.scaled_dot_product_attention(q.transpose(0, 1), keys.transpose(0, 1),
                                         values.transpose(0, 1), attn_mask=mask, scale=SCALE,
                                         enable_gqa=True)
    return out.transpose(0, 1)


def _attention_case(case, shape, device, dtype=torch.float32):
    """Scattered K/V of CASES[case] in a slot cache, as ``backend.forward`` takes them, and the
    dense per-request K/V and queries for the reference; all in ``dtype``."""
    heads, kv_heads, head_dim = shape
    rows = CASES[case]
    gen = torch.Generator().manual_seed(hash((case, shape)) % 1000)
    k_cache = torch.zeros(NUM_SLOTS + 1, kv_heads, head_dim, dtype=dtype)
    v_cache = torch.zeros_like(k_cache)
    width = max(p + n for p, n in rows) + 8
    req_to_token = torch.full((len(rows) + 2, width), NUM_SLOTS, dtype=torch.int32)
    free = torch.randperm(NUM_SLOTS, generator=gen)  # scattered slots, as after churn
    dense, qs, used = [], [], 0
    for i, (prefix, n) in enumerate(rows):
        seq_len = prefix + n
        slots = free[used:used + seq_len]
        used += seq_len
        req_to_token[i + 2, :seq_len] = slots.int()  # rows 0, 1 unused: the row is not the index
        kv = torch.randn(2, seq_len, kv_heads, head_dim, generator=gen).to(dtype)
        k_cache[slots[:prefix]], v_cache[slots[:prefix]] = kv[0, :prefix], kv[1, :prefix]
        dense.append(kv)
        qs.append(torch.randn(n, heads, head_dim, generator=gen).to(dtype))
    k_cache, v_cache, req_to_token = k_cache.to(device), v_cache.to(device), req_to_token.to(device)
    meta = build_metadata(req_to_token, np.arange(2, len(rows) + 2),
                          np.array([p + n for p, n in rows]), np.array([n for _, n in rows]))
    new_k = torch.cat([kv[0, p:] for kv, (p, _) in zip(dense, rows, strict=True)]).to(device)
    new_v = torch.cat([kv[1, p:] for kv, (p, _) in zip(dense, rows, strict=True)]).to(device)
    inputs = (torch.cat(qs).to(device), new_k, new_v, k_cache, v_cache, meta, SCALE)
    return inputs, req_to_token, dense, qs


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"h{s[0]}kv{s[1]}d{s[2]}")
@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("backend_name", list(BACKENDS))
def test_backend_matches_sdpa_reference(backend_name, case, shape):
    backend, device = BACKENDS[backend_name]()
    rows = CASES[case]
    inputs, req_to_token, dense, qs = _attention_case(case, shape, device)
    _, _, _, k_cache, v_cache, meta, _ = inputs
    assert meta.is_decode == (case == "decode")
    out = backend.forward(*inputs).cpu()
    expected = torch.cat([_reference(q, kv[0], kv[1], p)
                          for q, kv, (p, _) in zip(qs, dense, rows, strict=True)])
    torch.testing.assert_close(out, expected.flatten(1), rtol=1e-5, atol=1e-5)
    for kv, (p, n), i in zip(dense, rows, range(2, len(rows) + 2), strict=True):
        slots = req_to_token[i, :p + n].long()
        assert torch.equal(k_cache[slots].cpu(), kv[0]) and torch.equal(v_cache[slots].cpu(), kv[1])


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_triton_matches_the_torch_fallback_in_half_precision(dtype, case):
    """bf16 on a GPU only (Triton's CPU interpreter computes bf16 ``tl.dot`` wrongly); fp16 on
    either, under the interpreter here. Both backends run the same half-precision inputs."""
    backend, device = _triton_backend()
    if dtype == torch.bfloat16 and device.type != "cuda":
        pytest.skip("bf16 Triton needs a GPU: the CPU interpreter's bf16 dot is not exact")
    shape = SHAPES[0]
    inputs, *_ = _attention_case(case, shape, device, dtype)
    out = backend.forward(*inputs)
    fallback, *_ = _attention_case(case, shape, device, dtype)
    expected = TorchNativeBackend().forward(*fallback)
    assert out.dtype == expected.dtype == dtype
    torch.testing.assert_close(out.float(), expected.float(), rtol=3e-2, atol=3e-2)


def test_metadata_positions_and_logits_rows_are_derived_on_the_device():
    req_to_token = torch.arange(3 * 50, dtype=torch.int32).view(3, 50)
    meta = build_metadata(req_to_token, np.array([2, 0]), np.array([7, 3]), np.array([4, 3]))
    assert meta.positions.tolist() == [3, 4, 5, 6, 0, 1, 2]
    assert meta.out_slots.tolist() == [103, 104, 105, 106, 0, 1, 2]
    assert meta.logits_index.tolist() == [3, 6] and meta.max_extend_len == 4
    meta = build_metadata(req_to_token, np.array([1, 2]), np.array([5, 9]), np.array([1, 1]))
    assert meta.is_decode and meta.positions.tolist() == [4, 8]
    assert meta.out_slots.tolist() == [54, 108]


def test_kernels_compile_for_sm90_without_a_gpu(tmp_path):
    """The interpreter checks arithmetic; this checks the kernels build for an H100."""
    triton = pytest.importorskip("triton")
    if not (Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas").exists():
        pytest.skip("this triton ships no ptxas")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    root = Path(__file__).resolve().parents[4]
    env.update(TRITON_CACHE_DIR=str(tmp_path), TRITON_DEFAULT_FP_FUSION="1",
               PYTHONPATH=os.pathsep.join([str(root), env.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-m", "tests.reference_impl.engine.torch_engine.sm90_compile",
                           "bf16", "fp32"], env=env, cwd=root, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("B shared") == 6
