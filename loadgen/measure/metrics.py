"""Summary statistics computed from merged per-request records (never from per-worker averages).

Key names follow SGLang's `bench_serving` output where one exists (`output_throughput`,
`median_ttft_ms`, `p99_itl_ms`, `concurrency`, `max_output_tokens_per_s`, ...). Every metric is
defined in loadgen/README.md.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from loadgen.measure import knobs
from loadgen.measure.client_health import client_health
from loadgen.measure.inputs import input_figures
from loadgen.measure.records import RequestRecord, WorkerHealth
from loadgen.measure.sketch import ITL_SKETCH_AUTO_SAMPLES, LogHistogram, SketchBuilder, value_stats
from loadgen.measure.token_counts import reconcile_tokens
from loadgen.plan.config import RunConfig

LATENCY_METRICS = ("ttft", "tpot", "itl", "itl_per_token", "e2e_latency", "send_lag")
#: Latencies of runs that streamed reasoning or tool calls: time to first output token (AIPerf's
#: TTFO: the first answer token), reasoning duration, time to first tool-call token.
KIND_METRICS = ("ttfo", "reasoning_duration", "ttf_tool_call")
#: `reasoning_tokens_source`: the server's usage, else the reasoning events counted by the client.
SOURCE_REASONING_USAGE = "usage (completion_tokens_details.reasoning_tokens)"
SOURCE_REASONING_EVENTS = "reasoning events"


def pct_key(p: float) -> str:
    """'p99' for 99.0, 'p99.9' for 99.9 (as vLLM and SGLang spell them)."""
    return f"p{int(p)}" if float(p).is_integer() else f"p{p}"


def distribution(name: str, values_ms: list[float] | np.ndarray | LogHistogram, percentiles) -> dict:
    """`{mean,median,std,pNN,max}_{name}_ms` of the values (None for each but max when there are none)."""
    num, mean, std, vmax, pcts = value_stats(values_ms, [50.0, *percentiles])
    out: dict = {}
    if num == 0:
        out.update({f"mean_{name}_ms": None, f"median_{name}_ms": None, f"std_{name}_ms": None})
        out.update({f"{pct_key(p)}_{name}_ms": None for p in percentiles})
        return out
    out[f"mean_{name}_ms"] = mean
    out[f"median_{name}_ms"] = float(pcts[0])
    out[f"std_{name}_ms"] = std
    for p, v in zip(percentiles, pcts[1:], strict=True):
        out[f"{pct_key(p)}_{name}_ms"] = float(v)
    out[f"max_{name}_ms"] = vmax
    return out


def output_tokens(rec: RequestRecord) -> int:
    """Server-reported output tokens when given, else the client-side count."""
    return rec.usage_completion_tokens if rec.usage_completion_tokens is not None else rec.client_output_tokens


def input_tokens(rec: RequestRecord) -> int:
    """Server-reported prompt tokens when given, else the dataset's length."""
    return rec.usage_prompt_tokens if rec.usage_prompt_tokens is not None else rec.input_len


def origin_ns(cfg: RunConfig, rec: RequestRecord) -> int:
    """Where latencies start: the intended start in rate mode, else the actual send."""
    return rec.intended_ns if cfg.is_rate_mode else rec.start_ns


def tpot_ms(rec: RequestRecord) -> float | None:
    """(last content event - first) / (output tokens - 1); None with fewer than two tokens or events."""
    n_out = output_tokens(rec)
    if rec.first_token_ns is None or n_out <= 1 or len(rec.chunk_ns) <= 1:
        return None
    return (rec.chunk_ns[-1] - rec.first_token_ns) / 1e6 / (n_out - 1)


def itl_ms(rec: RequestRecord) -> np.ndarray:
    """Gaps between consecutive content events, in ms."""
    return np.diff(np.asarray(rec.chunk_ns, dtype=np.int64)) / 1e6


def is_itl_sketched(cfg: RunConfig, ok: list[RequestRecord]) -> bool:
    """Whether ITL goes into a sketch: --itl-sketch, or past ITL_SKETCH_AUTO_SAMPLES gaps."""
    return cfg.itl_sketch or sum(max(len(r.chunk_ns) - 1, 0) for r in ok) > ITL_SKETCH_AUTO_SAMPLES


def latencies(cfg: RunConfig, ok: list[RequestRecord]) -> dict[str, list[float]]:
    """Per-request (TTFT, TPOT, E2E) and per-event (ITL) latencies in ms of successful records;
    the two ITL entries are LogHistograms when `is_itl_sketched`."""
    lat: dict[str, list[float]] = {m: [] for m in LATENCY_METRICS}
    if is_itl_sketched(cfg, ok):
        return _sketched_itl(cfg, ok, lat)
    for r in ok:
        t0 = origin_ns(cfg, r)
        e2e = (r.end_ns - t0) / 1e6
        lat["e2e_latency"].append(e2e)
        if r.first_token_ns is not None:
            ttft = (r.first_token_ns - t0) / 1e6
            lat["ttft"].append(ttft)
            if (tpot := tpot_ms(r)) is not None:
                lat["tpot"].append(tpot)
        gaps = itl_ms(r)
        lat["itl"].extend(gaps.tolist())
        if len(r.chunk_tokens) == len(r.chunk_ns) and gaps.size:
            tok = np.maximum(np.asarray(r.chunk_tokens[1:]), 1.0)
            lat["itl_per_token"].extend((gaps / tok).tolist())
    return lat


def _sketched_itl(cfg: RunConfig, ok: list[RequestRecord], lat: dict) -> dict:
    itl, per_token = SketchBuilder(), SketchBuilder()
    for r in ok:
        t0 = origin_ns(cfg, r)
        lat["e2e_latency"].append((r.end_ns - t0) / 1e6)
        if r.first_token_ns is not None:
            lat["ttft"].append((r.first_token_ns - t0) / 1e6)
            if (tpot := tpot_ms(r)) is not None:
                lat["tpot"].append(tpot)
        gaps = itl_ms(r)
        itl.extend(gaps)
        if len(r.chunk_tokens) == len(r.chunk_ns) and gaps.size:
            per_token.extend(gaps / np.maximum(np.asarray(r.chunk_tokens[1:]), 1.0))
    lat["itl"], lat["itl_per_token"] = itl.flush(), per_token.flush()
    return lat


TTFT_PARTS = ("client_network", "queue", "prefill", "decode", "server_other")


def ttft_split(cfg: RunConfig, ok: list[RequestRecord]) -> dict | None:
    """Each request's TTFT, from its actual send, split with the server's own timing; None when no
    request carried one.

    client_network = TTFT − the server's arrival → first output; queue and prefill are the
    server's; decode is the server's decode span for a whole response (its TTFT is its E2E
    latency), 0 when streamed; server_other = the rest of the server's arrival → first output
    (body read, tokenizing, detokenizing, the HTTP process). The parts of each request sum to
    its TTFT."""
    parts: dict[str, list[float]] = {name: [] for name in TTFT_PARTS}
    for r in ok:
        first_output, queue, prefill = r.server_first_output_ms, r.server_queue_ms, r.server_prefill_ms
        if r.first_token_ns is None or first_output is None or queue is None or prefill is None:
            continue
        decode = 0.0 if cfg.stream else (r.server_decode_ms or 0.0)
        parts["client_network"].append((r.first_token_ns - r.start_ns) / 1e6 - first_output)
        parts["queue"].append(queue)
        parts["prefill"].append(prefill)
        parts["decode"].append(decode)
        parts["server_other"].append(first_output - queue - prefill - decode)
    if not parts["queue"]:
        return None
    arrays = {name: np.asarray(values, dtype=np.float64) for name, values in parts.items()}
    return {"requests": len(parts["queue"]),
            "mean_ms": {name: float(a.mean()) for name, a in arrays.items()},
            "p50_ms": {name: float(np.percentile(a, 50)) for name, a in arrays.items()},
            "p99_ms": {name: float(np.percentile(a, 99)) for name, a in arrays.items()}}


def per_turn(cfg: RunConfig, records: list[RequestRecord]) -> list[dict] | None:
    """Multi-turn sessions: per turn number (1-based), the requests, failures, TTFT mean/p50/p99 of the
    successful ones and their mean input tokens (server usage, else the dataset's); None without turns."""
    turns: dict[int, list[RequestRecord]] = {}
    for r in records:
        if r.turn is not None:
            turns.setdefault(r.turn, []).append(r)
    if not turns:
        return None
    rows = []
    for turn in sorted(turns):
        ok = [r for r in turns[turn] if r.ok]
        ttft = np.asarray([(r.first_token_ns - origin_ns(cfg, r)) / 1e6 for r in ok if r.first_token_ns is not None])
        mean, p50, p99 = (float(ttft.mean()), *map(float, np.percentile(ttft, [50, 99]))) if ttft.size \
            else (None, None, None)
        rows.append({"turn": turn + 1, "count": len(ok), "failed": len(turns[turn]) - len(ok),
                     "mean_ttft_ms": mean, "p50_ttft_ms": p50, "p99_ttft_ms": p99,
                     "mean_input_tokens": float(np.mean([input_tokens(r) for r in ok])) if ok else None})
    return rows


def reasoning_tokens(rec: RequestRecord) -> int:
    """The server's reasoning token count when given, else the client's count of reasoning events."""
    return rec.usage_reasoning_tokens if rec.usage_reasoning_tokens is not None else rec.reasoning_event_tokens


def kind_latencies(cfg: RunConfig, ok: list[RequestRecord]) -> dict[str, list[float]]:
    """Per request, in ms: time to its first answer token and to its first tool-call token (from
    where TTFT starts) and its reasoning duration (first reasoning event to the last)."""
    lat: dict[str, list[float]] = {m: [] for m in KIND_METRICS}
    for r in ok:
        t0 = origin_ns(cfg, r)
        if r.first_answer_ns is not None:
            lat["ttfo"].append((r.first_answer_ns - t0) / 1e6)
        if r.first_reasoning_ns is not None and r.last_reasoning_ns is not None:
            lat["reasoning_duration"].append((r.last_reasoning_ns - r.first_reasoning_ns) / 1e6)
        if r.first_tool_call_ns is not None:
            lat["ttf_tool_call"].append((r.first_tool_call_ns - t0) / 1e6)
    return lat


def output_kinds(cfg: RunConfig, ok: list[RequestRecord]) -> dict:
    """Reasoning and tool-call figures; empty when no request streamed either (then TTFT is the
    time to the first answer token). A latency none of the requests has is left out."""
    if not any(r.num_reasoning_events or r.num_tool_call_events or r.usage_reasoning_tokens for r in ok):
        return {}
    reasoning = [r for r in ok if r.num_reasoning_events or r.usage_reasoning_tokens]
    total = sum(reasoning_tokens(r) for r in reasoning)
    sources = {SOURCE_REASONING_USAGE if r.usage_reasoning_tokens is not None else SOURCE_REASONING_EVENTS
               for r in reasoning}
    out: dict = {
        "requests_with_reasoning": len(reasoning),
        "total_reasoning_tokens": total,
        "mean_reasoning_tokens": total / len(reasoning) if reasoning else None,
        "reasoning_tokens_source": None if not sources else sources.pop() if len(sources) == 1 else "mixed",
        "requests_with_tool_calls": sum(1 for r in ok if r.num_tool_call_events),
        "total_tool_call_events": sum(r.num_tool_call_events for r in ok),
    }
    for name, values in kind_latencies(cfg, ok).items():
        if values:  # NOTE: e.g. no TTFO when every answer was a tool call
            out.update(distribution(name, values, cfg.percentiles))
    return out


def _peaks(records: list[RequestRecord], t0: int) -> dict:
    ok = [r for r in records if r.ok]
    times = np.concatenate([np.asarray(r.chunk_ns, dtype=np.int64) for r in ok]) if ok else np.zeros(0)
    weights = np.concatenate([np.asarray(r.chunk_tokens, dtype=np.float64) for r in ok]) if ok else np.zeros(0)
    peak_tok = 0.0
    if times.size and weights.size == times.size:
        buckets = ((times - t0) // 1_000_000_000).astype(np.int64)
        peak_tok = float(np.bincount(buckets - buckets.min(), weights=weights).max())
    starts = np.asarray([r.start_ns for r in records], dtype=np.int64)
    ends = np.asarray([r.end_ns for r in records], dtype=np.int64)
    events = np.concatenate([starts, ends])
    deltas = np.concatenate([np.ones(len(starts)), -np.ones(len(ends))])
    order = np.lexsort((deltas, events))  # ends before starts at equal times
    peak_inflight = int(np.cumsum(deltas[order]).max()) if events.size else 0
    return {"max_output_tokens_per_s": peak_tok, "max_concurrent_requests": peak_inflight}


def _per_event_source(ok: list[RequestRecord]) -> str | None:
    """How each token event's tokens were counted: 'usage deltas', 'one per content event', or 'mixed'."""
    sources = {r.chunk_token_source for r in ok}
    return None if not sources else sources.pop() if len(sources) == 1 else "mixed"


def _goodput(cfg: RunConfig, ok: list[RequestRecord], duration_s: float) -> float | None:
    slo = cfg.slo
    if not slo.is_set:
        return None
    good = 0
    for r in ok:
        t0 = origin_ns(cfg, r)
        e2e = (r.end_ns - t0) / 1e6
        ttft = (r.first_token_ns - t0) / 1e6 if r.first_token_ns else e2e
        n = output_tokens(r)
        tpot = (e2e - ttft) / (n - 1) if n > 1 else 0.0
        good += all((
            slo.ttft_ms is None or ttft <= slo.ttft_ms,
            slo.tpot_ms is None or tpot <= slo.tpot_ms,
            slo.e2e_ms is None or e2e <= slo.e2e_ms,
        ))
    return good / duration_s if duration_s > 0 else 0.0


def _errors(records: list[RequestRecord]) -> dict:
    failed = [r for r in records if r.is_failed]
    counts = Counter(r.error_class for r in failed)
    examples = {}
    for r in failed:
        examples.setdefault(r.error_class, r.error_message)
    return {cls: {"count": n, "example": examples[cls]} for cls, n in sorted(counts.items())}


def summarize(cfg: RunConfig, records: list[RequestRecord], health: list[WorkerHealth],
              lat: dict[str, list[float]] | None = None) -> dict:
    """The run's summary dict (the `summary` block of the JSON output); `lat`: the successful
    records' `latencies`, when the caller already has them."""
    ok = [r for r in records if r.ok]
    if records:
        t0 = min(r.intended_ns for r in records)
        duration_s = (max(r.end_ns for r in records) - t0) / 1e9
    else:
        t0, duration_s = 0, 0.0
    lat = dict(lat) if lat is not None else latencies(cfg, ok)
    lat["send_lag"] = [(r.start_ns - r.intended_ns) / 1e6 for r in records]
    n_in = sum(input_tokens(r) for r in ok)
    n_out = sum(output_tokens(r) for r in ok)
    n_client = sum(r.client_output_tokens for r in ok)
    has_usage = any(r.usage_completion_tokens is not None for r in ok)
    per_s = (lambda x: x / duration_s) if duration_s > 0 else (lambda x: 0.0)
    summary = {
        "duration": duration_s,
        "completed": len(ok),
        "failed": sum(r.is_failed for r in records),
        "cancelled": sum(r.is_cancelled for r in records),
        "total_input_tokens": n_in,
        "total_input_tokens_dataset": sum(r.input_len for r in ok),
        "total_output_tokens": n_out,
        "total_output_tokens_client": n_client,
        "output_tokens_usage_minus_client": (n_out - n_client) if has_usage else None,
        "output_tokens_source": "usage" if has_usage else "client",
        "output_tokens_per_event_source": _per_event_source(ok),
        "total_output_tokens_retokenized": (sum(r.retokenized_output_tokens for r in ok)
                                            if ok and all(r.retokenized_output_tokens is not None for r in ok)
                                            else None),
        "token_event_rule": cfg.token_event_rule,
        "num_empty_text_events": sum(r.num_empty_text_events for r in ok),
        "output_tokens_reconciliation": reconcile_tokens(ok, cfg.drops_empty_text),
        "request_throughput": per_s(len(ok)),
        "input_throughput": per_s(n_in),
        "output_throughput": per_s(n_out),
        "total_throughput": per_s(n_in + n_out),
        "concurrency": per_s(sum(lat["e2e_latency"]) / 1e3),
        "request_goodput": _goodput(cfg, ok, duration_s),
        **_peaks(records, t0),
        **input_figures(cfg, records, ok, per_s),
    }
    for name in LATENCY_METRICS:
        summary.update(distribution(name, lat[name], cfg.percentiles))
    summary["itl_percentiles"] = (f"sketch (log histogram, within {lat['itl'].alpha:.0%})"
                                  if isinstance(lat["itl"], LogHistogram) else "exact")
    if (split := ttft_split(cfg, ok)) is not None:
        summary["ttft_split"] = split
    if (turns := per_turn(cfg, records)) is not None:
        summary["per_turn"] = turns
    summary.update(output_kinds(cfg, ok))
    summary.update(_knob_figures(cfg, records, ok))
    summary["errors"] = _errors(records)
    summary["client_health"] = client_health(cfg, health, lat["send_lag"], len(ok), ok, summary.get("median_ttft_ms"))
    summary["client_bound"] = summary["client_health"]["client_bound"]
    return summary


def _knob_figures(cfg: RunConfig, records: list[RequestRecord], ok: list[RequestRecord]) -> dict:
    """issue 32: the measured prefix-cache hit rate and the rate stages' achieved rates, where they apply."""
    out = {}
    if (cache := knobs.prefix_cache(ok)) is not None:
        out["prefix_cache"] = cache
    if (stages := knobs.rate_stages(cfg, records)) is not None:
        out["rate_stages"] = stages
    return out
