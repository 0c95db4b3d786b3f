"""Model weights: load a local HF checkpoint (``config.json`` + ``*.safetensors``) or make
the embedded default's deterministic seeded random weights.

Checkpoints use Hugging Face names; q/k/v and gate/up land in the model's fused weights at
load time (through row-slice views), and are split back when a checkpoint is written."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from reference_impl.engine.torch_engine.model import (
    LlamaForCausalLM,
    hf_param_views,
    rope_inv_freq,
)
from reference_impl.engine.torch_engine.model_config import ModelConfig, embedded_config

EMBEDDED_SEED = 0
_INIT_STD = 0.02
# config.json key of a weightless model directory (see ``random_model``): the weights' seed
RANDOM_SEED_KEY = "reference_impl_random_seed"


def load_model(model_path: str | Path | None, device: torch.device,
               dtype: torch.dtype) -> LlamaForCausalLM:
    """The model at ``model_path`` (None: the embedded default), on ``device`` in ``dtype``."""
    config = embedded_config() if model_path is None else ModelConfig.from_pretrained(model_path)
    with torch.device("meta"):
        model = LlamaForCausalLM(config).to(dtype)
    # NOTE: made in ``dtype`` on the device: no float32 copy (32 GB at 8B) that the caching
    # allocator would keep and the KV pool's sizing would not count as free.
    model.to_empty(device=device)
    # NOTE: the rotary buffer is not a weight and stays float32 whatever the model's dtype.
    model.model.rotary_emb.inv_freq = rope_inv_freq(config).to(device)
    if model_path is None:
        init_random_weights(model, EMBEDDED_SEED)
    elif (seed := _random_seed(Path(model_path))) is not None:
        init_random_weights_on_device(model, seed)
    else:
        load_safetensors(model, Path(model_path))
    return model.eval()


def _random_seed(model_dir: Path) -> int | None:
    if any(model_dir.glob("*.safetensors")):
        return None
    return json.loads((model_dir / "config.json").read_text()).get(RANDOM_SEED_KEY)


def init_random_weights_on_device(model: LlamaForCausalLM, seed: int) -> None:
    """Seeded weights drawn on the model's device (fast at 8B; values differ across devices)."""
    device = next(model.parameters()).device
    gen = torch.Generator(device).manual_seed(seed)
    with torch.no_grad():
        for name, param in sorted(model.named_parameters()):
            if name.endswith("norm.weight"):
                param.normal_(1.0, 0.1, generator=gen)
            else:
                param.normal_(0.0, _INIT_STD, generator=gen)


def init_random_weights(model: LlamaForCausalLM, seed: int) -> None:
    """Seeded weights, identical on every device: drawn on the CPU, then copied."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in sorted(hf_param_views(model).items()):
            if name.endswith("norm.weight"):
                values = 1.0 + 0.1 * torch.randn(param.shape, generator=gen)
            else:
                values = _INIT_STD * torch.randn(param.shape, generator=gen)
            param.copy_(values)


def load_safetensors(model: LlamaForCausalLM, model_dir: Path) -> None:
    """Copy every tensor of ``model_dir/*.safetensors`` into the parameter of the same name."""
    params = hf_param_views(model)
    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors files in {model_dir}")
    loaded: set[str] = set()
    with torch.no_grad():
        for file in files:
            with safe_open(str(file), framework="pt") as f:
                for name in f.keys():  # noqa: SIM118 - safe_open is not a mapping
                    if name not in params:
                        if model.lm_head is None and name == "lm_head.weight":
                            continue  # tied: the embedding is the output layer
                        raise KeyError(f"{file.name}: unexpected tensor {name!r}")
                    params[name].copy_(f.get_tensor(name))
                    loaded.add(name)
    missing = sorted(set(params) - loaded)
    if missing:
        raise KeyError(f"{model_dir}: tensors missing from the checkpoint: {missing[:5]}")


def save_safetensors(model: LlamaForCausalLM, model_dir: str | Path) -> None:
    """Write ``model`` as a HF-format checkpoint: ``config.json`` + ``model.safetensors``."""
    model_dir = Path(model_dir)
    model_dir.mkdir(parents=True, exist_ok=True)
    (model_dir / "config.json").write_text(json.dumps(model.config.to_hf_dict(), indent=1))
    tensors = {n: p.detach().cpu().contiguous() for n, p in hf_param_views(model).items()}
    save_file(tensors, str(model_dir / "model.safetensors"), metadata={"format": "pt"})
