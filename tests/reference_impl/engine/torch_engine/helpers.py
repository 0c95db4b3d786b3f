"""Shared builders for the torch engine tests: engines, requests, HF reference models."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from reference_impl.config import ServerArgs
from reference_impl.engine.torch_engine import TorchEngine, save_safetensors
from reference_impl.hot_paths import HOT_PATHS
from reference_impl.messages import SamplingParams, TokenizedGenerateReq
from reference_impl.scheduler.request import Req
from reference_impl.scheduler.token_storage import TokenStorage
from reference_impl.tokenizer import ByteLevelTokenizer


def make_engine(model_path: str | Path | None = None, storage: str = "array",
                max_total_tokens: int = 4096, **overrides) -> tuple[TorchEngine, TokenStorage]:
    """A float32 CPU torch engine and its token storage (``overrides``: more ServerArgs)."""
    args = ServerArgs(engine="torch", device="cpu", dtype="float32", max_total_tokens=max_total_tokens,
                      model_path=None if model_path is None else str(model_path),
                      token_storage=storage, **overrides)
    kit = HOT_PATHS["H4"].create(storage)
    return TorchEngine(args, ByteLevelTokenizer(), kit), kit


def make_req(rid: str, ids: list[int], storage: TokenStorage, max_new: int = 64,
             **sampling) -> Req:
    """A scheduler request as the scheduler builds it."""
    msg = TokenizedGenerateReq(rid, ids, SamplingParams(max_new_tokens=max_new, **sampling),
                               stream=False)
    return Req(msg, storage, 0)


def hf_model_like(engine: TorchEngine, tmp_dir: Path):
    """Hugging Face's ``LlamaForCausalLM`` with the engine's weights (written, then loaded)."""
    from transformers import LlamaForCausalLM

    save_safetensors(engine.model, tmp_dir)
    return LlamaForCausalLM.from_pretrained(tmp_dir, attn_implementation="eager",
                                            dtype=torch.float32).eval()


@torch.no_grad()
def hf_last_logits(hf_model, ids: list[int]) -> torch.Tensor:
    """(vocab,) float32 logits after ``ids`` (a full forward, no cache)."""
    return hf_model(torch.tensor([ids])).logits[0, -1].float()


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a - b| / max |b|."""
    return float((a - b).abs().max() / b.abs().max())


def triton_device() -> torch.device:
    """Where the Triton kernels can run here: CUDA, else the CPU under the interpreter (set by
    this directory's conftest); skips when triton is missing or was imported too early."""
    pytest.importorskip("triton")
    if torch.cuda.is_available():
        return torch.device("cuda")
    import triton.language as tl
    from triton.runtime.interpreter import InterpretedFunction

    if not isinstance(tl.zeros, InterpretedFunction):
        pytest.skip("triton was imported before TRITON_INTERPRET was set")
    return torch.device("cpu")
