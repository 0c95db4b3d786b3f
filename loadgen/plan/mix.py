"""Per request, the run-side choices of issue 32: which server (several --base-url), which model
(a --model mix) and whether the client cancels it (--request-cancellation-rate).

Servers go round-robin in proportion to their weights (smooth weighted round-robin, as nginx: exact
shares over every window of sum(weights) requests); models and cancellations are drawn from --seed,
so a server and a model are never tied together by the two cycles lining up.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from loadgen.plan.config import RunConfig

#: Mixed into --seed so these draws do not repeat the dataset's or the arrivals'.
_MODEL_STREAM, _CANCEL_STREAM = 3201, 3202


@dataclass(frozen=True)
class Pick:
    """One request's server (index into `RunConfig.targets`), model (index into the model list) and
    cancellation delay (None: not cancelled)."""

    url_index: int = 0
    model_index: int = 0
    cancel_after_s: float | None = None


def weighted_round_robin(weights: list[float], num: int) -> list[int]:
    """`num` indices in proportion to `weights`, spread evenly (smooth weighted round-robin)."""
    current, total, out = [0.0] * len(weights), sum(weights), []
    for _ in range(num):
        current = [c + w for c, w in zip(current, weights, strict=True)]
        best = max(range(len(weights)), key=current.__getitem__)
        current[best] -= total
        out.append(best)
    return out


def weighted_draw(weights: list[float], num: int, seed: list[int]) -> list[int]:
    """`num` indices drawn independently in proportion to `weights` (reproducible from `seed`)."""
    if len(weights) == 1:
        return [0] * num
    p = np.asarray(weights, dtype=np.float64)
    return np.random.default_rng(seed).choice(len(weights), size=num, p=p / p.sum()).tolist()


def picks(cfg: RunConfig, num: int) -> list[Pick]:
    """The measured requests' choices, in request order."""
    urls = weighted_round_robin([w for _, w in cfg.targets], num)
    models = weighted_draw([w for _, w in cfg.models] or [1.0], num, [cfg.seed, _MODEL_STREAM])
    cancel = np.random.default_rng([cfg.seed, _CANCEL_STREAM]).random(num) < cfg.request_cancellation_rate / 100
    delay = cfg.request_cancellation_delay_s
    return [Pick(u, m, delay if c else None) for u, m, c in zip(urls, models, cancel.tolist(), strict=True)]


def warmup_picks(cfg: RunConfig, num: int) -> list[Pick]:
    """Warm-up requests visit every server and model in turn and are never cancelled."""
    num_models = max(len(cfg.models), 1)
    return [Pick(i % len(cfg.targets), i % num_models) for i in range(num)]


def model_names(cfg: RunConfig, model: str) -> list[str]:
    """The model of each index: the --model mix, else the one model."""
    return [name for name, _ in cfg.models] or [model]
