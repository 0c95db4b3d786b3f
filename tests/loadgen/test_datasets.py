"""Datasets and arrival schedules are seeded and follow upstream's length rule."""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest

from loadgen.plan.datasets import DatasetConfig, build_prompts, sample_lengths
from loadgen.plan.schedule import arrival_offsets_s


def test_random_lengths_are_uniform_in_upstream_range():
    lens = sample_lengths(random.Random(0), 100, 0.25, 5000)
    assert min(lens) == 25 and max(lens) == 100
    assert sample_lengths(random.Random(0), 3, 0.0, 50).count(0) == 0


def test_datasets_are_seeded():
    cfg = DatasetConfig(name="random", num_prompts=5, random_input_len=20, random_output_len=9, seed=3)
    assert build_prompts(cfg) == build_prompts(cfg)
    ids = build_prompts(DatasetConfig(name="random-ids", num_prompts=4, random_input_len=10, random_range_ratio=1.0,
                                      vocab_size=7))
    assert all(len(p.prompt) == p.input_len == 10 and p.is_exact_input_len for p in ids)
    assert {i for p in ids for i in p.prompt} <= set(range(7))  # drawn from the vocabulary given


def test_random_ids_without_a_vocabulary_is_refused():
    with pytest.raises(ValueError, match="vocabulary size"):
        build_prompts(DatasetConfig(name="random-ids", num_prompts=2, random_input_len=4))
    with pytest.raises(ValueError, match="vocab_size"):
        DatasetConfig(name="random-ids", vocab_size=0)


def test_shared_prefix_groups_share_their_prefix():
    cfg = DatasetConfig(name="shared-prefix", num_prompts=6, shared_prefix_groups=2, shared_prefix_len=30,
                        random_input_len=5)
    prompts = [p.prompt for p in build_prompts(cfg)]
    assert prompts[0].split("\n")[0] == prompts[2].split("\n")[0] != prompts[1].split("\n")[0]


def test_sharegpt_file(tmp_path):
    conv = [{"conversations": [{"from": "human", "value": "q " * 40}, {"from": "gpt", "value": "a " * 80}]}] * 3
    path = tmp_path / "sg.json"
    path.write_text(json.dumps(conv))
    prompts = build_prompts(DatasetConfig(name="sharegpt", dataset_path=str(path), num_prompts=2))
    assert len(prompts) == 2 and prompts[0].output_len == 40


def test_arrivals_constant_and_poisson():
    const = arrival_offsets_s(50.0, math.inf, 11, None, 0)
    np.testing.assert_allclose(np.diff(const), 0.02)
    poisson = arrival_offsets_s(100.0, 1.0, 20000, None, 0)
    assert abs(np.mean(np.diff(poisson)) - 0.01) < 0.0005
    assert max(arrival_offsets_s(10.0, 1.0, None, 2.0, 0)) < 2.0


def test_vllm_rate_ramps():
    from loadgen.plan.schedule import ramp_offsets_s, ramp_rate

    assert ramp_rate("linear", 2.0, 10.0, 0, 5) == 2.0 and ramp_rate("linear", 2.0, 10.0, 4, 5) == 10.0
    assert ramp_rate("exponential", 1.0, 16.0, 2, 5) == 4.0
    times = ramp_offsets_s("linear", 10.0, 100.0, math.inf, 4, 0)
    np.testing.assert_allclose(np.diff(times), [1 / 40, 1 / 70, 1 / 100])
    assert times[0] == 0.0
