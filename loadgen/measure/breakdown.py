"""Issue 32's per-server and per-model figures (several --base-url, a --model mix), and the
cancelled requests' count: each group's requests summarised apart, over the whole run's duration
(so the groups' throughputs add up to the run's)."""

from __future__ import annotations

import numpy as np

from loadgen.measure.metrics import latencies, output_tokens
from loadgen.measure.records import RequestRecord
from loadgen.plan.config import RunConfig


def _group_row(cfg: RunConfig, records: list[RequestRecord], duration_s: float) -> dict:
    ok = [r for r in records if r.ok]
    lat = latencies(cfg, ok)
    row = {"requests": len(records), "completed": len(ok), "failed": sum(r.is_failed for r in records),
           "cancelled": sum(r.is_cancelled for r in records),
           "request_throughput": len(ok) / duration_s if duration_s > 0 else 0.0,
           "output_throughput": sum(output_tokens(r) for r in ok) / duration_s if duration_s > 0 else 0.0}
    for name in ("ttft", "e2e_latency"):
        values = np.asarray(lat[name], dtype=np.float64)
        row[f"mean_{name}_ms"] = float(values.mean()) if values.size else None
        for p in (50, 99):
            row[f"p{p}_{name}_ms"] = float(np.percentile(values, p)) if values.size else None
    return row


def breakdown(cfg: RunConfig, records: list[RequestRecord], duration_s: float, key: str,
              pairs: tuple[tuple[str, float], ...], label: str) -> list[dict] | None:
    """One row per (name, weight) of `pairs` for the records whose `key` field is its index; None
    with fewer than two (the single-server, single-model case keeps its JSON as it was)."""
    if len(pairs) < 2:
        return None
    groups: list[list[RequestRecord]] = [[] for _ in pairs]
    for r in records:
        groups[getattr(r, key)].append(r)
    return [{label: name, "weight": weight, **_group_row(cfg, group, duration_s)}
            for (name, weight), group in zip(pairs, groups, strict=True)]


def run_side_figures(cfg: RunConfig, records: list[RequestRecord], duration_s: float) -> dict:
    """`per_url` and `per_model` for the summary, where there are several."""
    out = {}
    if (rows := breakdown(cfg, records, duration_s, "url_index", cfg.base_urls, "url")) is not None:
        out["per_url"] = rows
    if (rows := breakdown(cfg, records, duration_s, "model_index", cfg.models, "model")) is not None:
        out["per_model"] = rows
    return out
