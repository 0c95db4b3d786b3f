"""Numbers derived from loadgen's per-request records and from the stacks: ITL quantiles, growth fits."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

QUANTILES = np.linspace(0, 100, 201)


def _gaps(record: dict) -> np.ndarray:
    """Gaps (ms) between a request's consecutive content chunks."""
    stamps = np.asarray([t for t in record.get("chunk_ms") or [] if t is not None], dtype=np.float64)
    return np.diff(stamps) if len(stamps) > 1 else np.empty(0)


def from_records(path: Path) -> dict:
    """ITL quantiles (per chunk, ms) from a ``--records`` file."""
    gaps = []
    with open(path) as f:
        for line in f:
            record = json.loads(line)
            if not record.get("ok", True):
                continue
            gaps.append(_gaps(record))
    itl = np.concatenate(gaps) if gaps else np.empty(0)
    if not len(itl):
        return {"itl_quantiles_ms": [], "num_itl": 0}
    return {"itl_quantiles_ms": np.percentile(itl, QUANTILES).round(4).tolist(), "num_itl": int(len(itl))}


def loglog_slope(points: list) -> tuple[float, float] | None:
    """Least-squares slope and intercept of log10 y on log10 x (points with x, y > 0)."""
    kept = [(x, y) for x, y in points if x > 0 and y > 0]
    if len({x for x, _ in kept}) < 2:
        return None
    slope, intercept = np.polyfit(np.log10([x for x, _ in kept]), np.log10([y for _, y in kept]), 1)
    return float(slope), float(intercept)


def ratio(value: float | None, base: float | None) -> float | None:
    """``value / base``, or None when either is missing or the base is zero."""
    if value is None or base is None or not base or math.isnan(value) or math.isnan(base):
        return None
    return value / base


def is_sweep(outcome) -> bool:
    """Whether a run only feeds the cost-vs-length sweep (not the side-by-side tables)."""
    return bool(outcome.run.params.get("sweep"))


def cost_by_length(outcomes, process: str = "http") -> dict[str, list[tuple[int, float]]]:
    """Per form: ``(output length, CPU ms of `process` per completed request)``, sorted by length."""
    points: dict[str, list[tuple[int, float]]] = {}
    for o in outcomes:
        completed = o.result.get("completed") or 0
        if not completed:
            continue
        form = o.run.params.get("form", o.run.name)
        points.setdefault(form, []).append((o.run.load.output_len, 1e3 * o.cpu_s[process] / completed))
    return {form: sorted(p) for form, p in points.items() if len(p) > 1}
