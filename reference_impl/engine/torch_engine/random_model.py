"""Weightless model directories of real shapes: a ``config.json`` whose weights the engine
draws from a seed at load time (no download, no multi-GB checkpoint on disk)::

    python -m reference_impl.engine.torch_engine.random_model --shape llama3-8b --out /tmp/llama3-8b
    python -m reference_impl --engine torch --model-path /tmp/llama3-8b
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from reference_impl.engine.torch_engine.model_config import ModelConfig
from reference_impl.engine.torch_engine.weights import RANDOM_SEED_KEY

SHAPES = {
    "llama3-8b": ModelConfig(vocab_size=128256, hidden_size=4096, intermediate_size=14336,
                             num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                             head_dim=128, max_position_embeddings=8192, rms_norm_eps=1e-5,
                             rope_theta=500000.0),
    "llama3-1b": ModelConfig(vocab_size=128256, hidden_size=2048, intermediate_size=8192,
                             num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8,
                             head_dim=64, max_position_embeddings=8192, rms_norm_eps=1e-5,
                             rope_theta=500000.0, tie_word_embeddings=True),
    # Llama 3's vocabulary on a toy body: the 128K-id output layer and sampling, on a CPU
    "llama3-tiny": ModelConfig(vocab_size=128256, hidden_size=64, intermediate_size=128,
                               num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                               head_dim=16, max_position_embeddings=8192, rms_norm_eps=1e-5,
                               rope_theta=500000.0, tie_word_embeddings=True),
}


def write_random_model_dir(shape: str | ModelConfig, out: str | Path, seed: int = 0) -> Path:
    """``out/config.json`` of ``shape`` (a name of ``SHAPES`` or a config) with the weights'
    seed; returns ``out``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    config = SHAPES[shape] if isinstance(shape, str) else shape
    config = {**config.to_hf_dict(), RANDOM_SEED_KEY: seed}
    (out / "config.json").write_text(json.dumps(config, indent=1))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", choices=sorted(SHAPES), default="llama3-8b")
    parser.add_argument("--out", required=True, help="directory to write config.json into")
    parser.add_argument("--seed", type=int, default=0)
    ns = parser.parse_args(argv)
    print(write_random_model_dir(ns.shape, ns.out, ns.seed))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
