"""The torch engine: a Llama-family model runner (GPU first, CPU fallback) behind ``Engine``."""

from reference_impl.engine.torch_engine.engine import TorchEngine, resolve_device, resolve_dtype
from reference_impl.engine.torch_engine.kv_cache import KVCache, PrefixCache, SlotAllocator
from reference_impl.engine.torch_engine.model import LlamaForCausalLM
from reference_impl.engine.torch_engine.model_config import ModelConfig, embedded_config
from reference_impl.engine.torch_engine.weights import load_model, save_safetensors

__all__ = [
    "KVCache",
    "LlamaForCausalLM",
    "ModelConfig",
    "PrefixCache",
    "SlotAllocator",
    "TorchEngine",
    "embedded_config",
    "load_model",
    "resolve_device",
    "resolve_dtype",
    "save_safetensors",
]
