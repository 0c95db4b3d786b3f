"""Weightless model directories: the shape round-trips through config.json, the weights come
from the seed (same seed, same weights), and the engine serves them."""

from __future__ import annotations

import dataclasses

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from reference_impl.engine.torch_engine import ModelConfig, embedded_config, load_model
from reference_impl.engine.torch_engine.random_model import SHAPES, write_random_model_dir
from tests.reference_impl.engine.torch_engine.helpers import make_engine, make_req


def test_llama3_8b_shape_round_trips_through_config_json(tmp_path):
    path = write_random_model_dir("llama3-8b", tmp_path / "m")
    assert ModelConfig.from_pretrained(path) == SHAPES["llama3-8b"]


def test_weights_come_from_the_seed(tmp_path):
    config = dataclasses.replace(embedded_config(), num_hidden_layers=1)
    cpu = torch.device("cpu")
    a = load_model(write_random_model_dir(config, tmp_path / "a", seed=1), cpu, torch.float32)
    b = load_model(write_random_model_dir(config, tmp_path / "b", seed=1), cpu, torch.float32)
    c = load_model(write_random_model_dir(config, tmp_path / "c", seed=2), cpu, torch.float32)
    for (name, pa), pb, pc in zip(a.named_parameters(), b.parameters(), c.parameters(), strict=True):
        assert torch.equal(pa, pb) and not torch.equal(pa, pc), name


class _Float32Elements(TorchDispatchMode):
    """Counts the elements of every float32 tensor an op makes off the meta device."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.count += sum(t.numel() for t in tree_leaves(out) if isinstance(t, torch.Tensor)
                          and t.dtype == torch.float32 and t.device.type != "meta")
        return out


def test_weights_are_made_in_their_dtype_without_a_float32_copy(tmp_path):
    """On a GPU a float32 detour (32 GB at 8B) stays in the caching allocator and shrinks the KV
    pool; here the ops that make the weights are watched."""
    path = write_random_model_dir(dataclasses.replace(embedded_config(), num_hidden_layers=2),
                                  tmp_path / "m")
    with _Float32Elements() as watch:
        model = load_model(path, torch.device("cpu"), torch.bfloat16)
    num_weights = sum(p.numel() for p in model.parameters())
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert watch.count < num_weights // 100, f"{watch.count} float32 elements made"


def test_engine_runs_a_weightless_directory(tmp_path):
    config = dataclasses.replace(embedded_config(), num_hidden_layers=2)
    engine, storage = make_engine(write_random_model_dir(config, tmp_path / "m"))
    logits = engine.compute_logits([make_req("r", [256, *b"hello"], storage)])
    assert logits.shape == (1, config.vocab_size) and bool(logits.isfinite().all())
