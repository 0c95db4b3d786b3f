"""The Llama-family model config: read from a HF ``config.json`` or the embedded default."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from reference_impl.config import EMBEDDED_MODEL_CONTEXT_LENGTH
from reference_impl.tokenizer.byte_level import ByteLevelTokenizer

ROPE_TYPES = ("default", "llama3")


@dataclass(frozen=True)
class ModelConfig:
    """The fields of a HF ``LlamaConfig`` that the model runner uses."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    max_position_embeddings: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_scaling: dict = field(default_factory=dict, hash=False)
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    mlp_bias: bool = False

    def __post_init__(self) -> None:
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(f"num_attention_heads ({self.num_attention_heads}) must be a multiple "
                             f"of num_key_value_heads ({self.num_key_value_heads})")
        if self.rope_type not in ROPE_TYPES:
            raise ValueError(f"rope type {self.rope_type!r} is not supported; choose from {ROPE_TYPES}")

    @property
    def rope_type(self) -> str:
        return self.rope_scaling.get("rope_type", self.rope_scaling.get("type", "default"))

    @property
    def num_kv_groups(self) -> int:
        """Query heads per KV head (GQA)."""
        return self.num_attention_heads // self.num_key_value_heads

    @classmethod
    def from_hf_dict(cls, cfg: dict) -> ModelConfig:
        """From the dict of a HF ``config.json`` (transformers 4 and 5 spellings of RoPE)."""
        rope = dict(cfg.get("rope_scaling") or cfg.get("rope_parameters") or {})
        theta = cfg.get("rope_theta", rope.get("rope_theta", 10000.0))
        heads = cfg["num_attention_heads"]
        return cls(
            vocab_size=cfg["vocab_size"],
            hidden_size=cfg["hidden_size"],
            intermediate_size=cfg["intermediate_size"],
            num_hidden_layers=cfg["num_hidden_layers"],
            num_attention_heads=heads,
            num_key_value_heads=cfg.get("num_key_value_heads") or heads,
            head_dim=cfg.get("head_dim") or cfg["hidden_size"] // heads,
            max_position_embeddings=cfg.get("max_position_embeddings", 4096),
            rms_norm_eps=cfg.get("rms_norm_eps", 1e-6),
            rope_theta=float(theta),
            rope_scaling={k: v for k, v in rope.items() if k != "rope_theta"},
            tie_word_embeddings=cfg.get("tie_word_embeddings", False),
            attention_bias=cfg.get("attention_bias", False),
            mlp_bias=cfg.get("mlp_bias", False),
        )

    @classmethod
    def from_pretrained(cls, model_path: str | Path) -> ModelConfig:
        """From ``<model_path>/config.json``."""
        return cls.from_hf_dict(json.loads((Path(model_path) / "config.json").read_text()))

    def to_hf_dict(self) -> dict:
        """A ``LlamaConfig``-compatible dict (for writing checkpoints and for transformers)."""
        rope = {"rope_type": self.rope_type, **self.rope_scaling, "rope_theta": self.rope_theta}
        return {
            "architectures": ["LlamaForCausalLM"], "model_type": "llama",
            "vocab_size": self.vocab_size, "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads, "head_dim": self.head_dim,
            "max_position_embeddings": self.max_position_embeddings,
            "rms_norm_eps": self.rms_norm_eps, "rope_theta": self.rope_theta,
            "rope_scaling": None if self.rope_type == "default" else rope,
            "tie_word_embeddings": self.tie_word_embeddings,
            "attention_bias": self.attention_bias, "mlp_bias": self.mlp_bias,
            "hidden_act": "silu",
        }


def embedded_config() -> ModelConfig:
    """A small Llama over the embedded byte-level tokenizer's vocabulary (no download)."""
    return ModelConfig(
        vocab_size=ByteLevelTokenizer().vocab_size,
        hidden_size=256,
        intermediate_size=688,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=EMBEDDED_MODEL_CONTEXT_LENGTH,
        rope_theta=10000.0,
        tie_word_embeddings=True,
    )
