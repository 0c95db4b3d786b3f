"""Compile the Triton attention kernels for an H100 (sm_90) without a GPU: Triton's front end,
its GPU passes, PTX and ptxas (shipped with triton). Catches what the interpreter cannot
(loop-carried types, dot shapes, shared memory). Run in a process without TRITON_INTERPRET::

    python -m tests.reference_impl.engine.torch_engine.sm90_compile [bf16|fp32 ...]
"""

from __future__ import annotations

import sys

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from reference_impl.engine.torch_engine import triton_attention as ta

TARGET = GPUTarget("cuda", 90, 32)
LLAMA3_8B = {"HEAD_DIM": 128, "BLOCK_D": 128}


def _compile(fn, types: dict[str, str], consts: dict, num_warps: int):
    signature = {name: "constexpr" if name in consts else types.get(name, "i32")
                 for name in fn.arg_names}
    kernel = triton.compile(ASTSource(fn, signature, consts), target=TARGET,
                            options={"num_warps": num_warps})
    print(f"{fn.__name__} {types.get('Q', types.get('Out'))}: {kernel.metadata.shared} B shared")
    return kernel


def compile_all(dtype: str) -> None:
    """The decode stages and the extend kernel for the Llama-3-8B shape in ``dtype``."""
    precision = "ieee" if dtype == "fp32" else "tf32"
    io = {"Q": f"*{dtype}", "K": f"*{dtype}", "V": f"*{dtype}", "Out": f"*{dtype}",
          "ReqToToken": "*i32", "ReqIdx": "*i32", "SeqLens": "*i32", "ExtStart": "*i32",
          "ExtLens": "*i32", "MidO": "*fp32", "MidLse": "*fp32", "sm_scale": "fp32"}
    _compile(ta._decode_stage1, io, {**LLAMA3_8B, "KV_GROUP": 4, "BLOCK_H": 16, "BLOCK_N": 64,
                                     "NUM_SPLITS": 16, "PRECISION": precision}, 4)
    _compile(ta._decode_stage2, {k: v for k, v in io.items() if k != "Q"},
             {**LLAMA3_8B, "NUM_SPLITS": 16}, 2)
    _compile(ta._extend_kernel, io, {**LLAMA3_8B, "KV_GROUP": 4, "BLOCK_M": 64, "BLOCK_N": 64,
                                     "PRECISION": precision}, 4)


if __name__ == "__main__":
    for name in sys.argv[1:] or ["bf16"]:
        compile_all(name)
