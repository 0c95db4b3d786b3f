"""What the plan-side knobs achieved: the measured prefix-cache hit rate (the server's
`usage.prompt_tokens_details.cached_tokens`) and the achieved rate per `--request-rate-stages` stage."""

from __future__ import annotations

from loadgen.measure.records import RequestRecord
from loadgen.plan.config import RunConfig
from loadgen.plan.schedule import stage_of


def prefix_cache(ok: list[RequestRecord]) -> dict | None:
    """Sum of cached tokens over sum of prompt tokens, over the successful requests whose usage
    gave both; None when no response carried cached_tokens."""
    told = [r for r in ok if r.usage_cached_tokens is not None and r.usage_prompt_tokens is not None]
    if not told:
        return None
    cached, prompt = sum(r.usage_cached_tokens for r in told), sum(r.usage_prompt_tokens for r in told)
    return {"cached_tokens": cached, "prompt_tokens": prompt, "num_requests": len(told),
            "measured_hit_rate": cached / prompt if prompt else None}


def rate_stages(cfg: RunConfig, records: list[RequestRecord]) -> list[dict] | None:
    """Per stage: the rate asked, the requests planned in it (by intended time), those whose send
    began in it and their rate (sent / the stage's seconds), and those of them that succeeded."""
    if not cfg.rate_stages or not records:
        return None
    t0 = min(r.intended_ns for r in records)
    rows = [{"stage": k + 1, "rate": rate, "duration_s": secs, "planned": 0, "sent": 0, "completed": 0}
            for k, (rate, secs) in enumerate(cfg.rate_stages)]
    for r in records:
        if (k := stage_of(cfg.rate_stages, (r.intended_ns - t0) / 1e9)) is not None:
            rows[k]["planned"] += 1
        if (k := stage_of(cfg.rate_stages, (r.start_ns - t0) / 1e9)) is not None:
            rows[k]["sent"] += 1
            rows[k]["completed"] += r.ok
    for row in rows:
        row["achieved_rate"] = row["sent"] / row["duration_s"]
    return rows
