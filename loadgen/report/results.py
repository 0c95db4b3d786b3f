"""Output: the results JSON, the per-request JSONL, the final table, and `compare` of several runs."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
import time

from loadgen import __version__
from loadgen.measure.machine import machine
from loadgen.measure.metrics import input_tokens, origin_ns, output_tokens
from loadgen.measure.records import RequestRecord
from loadgen.measure.workload import workload
from loadgen.run.runner import RunResult

#: The result's rows: (summary key, label, format). The terminal's headline block and details
#: (terminal.py) and the page's summary table (html.py) all read these.
TABLE_ROWS = (
    ("completed", "Successful requests", "{:,.0f}"),
    ("failed", "Failed requests", "{:,.0f}"),
    ("duration", "Benchmark duration (s)", "{:,.2f}"),
    ("total_input_tokens", "Total input tokens", "{:,.0f}"),
    ("total_output_tokens", "Total output tokens (server usage)", "{:,.0f}"),
    ("total_output_tokens_client", "Total output tokens (client count)", "{:,.0f}"),
    ("output_tokens_per_event_source", "  client count per event from", "{}"),
    ("output_tokens_usage_minus_client", "  usage minus client count", "{:,.0f}"),
    ("total_output_tokens_retokenized", "Total output tokens (retokenized text)", "{:,.0f}"),
    ("request_throughput", "Request throughput (req/s)", "{:,.2f}"),
    ("input_throughput", "Input token throughput (tok/s)", "{:,.2f}"),
    ("output_throughput", "Output token throughput (tok/s)", "{:,.2f}"),
    ("total_throughput", "Total token throughput (tok/s)", "{:,.2f}"),
    ("max_output_tokens_per_s", "Peak output throughput (tok/s, 1 s)", "{:,.0f}"),
    ("concurrency", "Mean requests in flight", "{:,.2f}"),
    ("max_concurrent_requests", "Peak requests in flight", "{:,.0f}"),
    ("request_goodput", "Request goodput (req/s)", "{:,.2f}"),
    # issue 32: reasoning and tool calls (only in runs that streamed either: metrics.output_kinds)
    ("requests_with_reasoning", "Requests with reasoning", "{:,.0f}"),
    ("total_reasoning_tokens", "Total reasoning tokens", "{:,.0f}"),
    ("mean_reasoning_tokens", "  per request with reasoning", "{:,.1f}"),
    ("reasoning_tokens_source", "  counted from", "{}"),
    ("requests_with_tool_calls", "Requests with tool calls", "{:,.0f}"),
    ("total_tool_call_events", "Tool-call events (in the output)", "{:,.0f}"),
    # issue 32: APIs (None where they do not apply: left out)
    ("total_embedding_inputs", "Embeddings inputs answered", "{:,.0f}"),
    ("embedding_input_throughput", "Embeddings input throughput (inputs/s)", "{:,.2f}"),
    ("total_images", "Images sent", "{:,.0f}"),
    ("total_request_bytes", "Request bytes sent (total)", "{:,.0f}"),
    ("mean_request_bytes", "Request bytes sent (mean per request)", "{:,.0f}"),
)
#: TABLE_ROWS keys a run has only when it streamed reasoning or tool calls.
KIND_KEYS = ("requests_with_reasoning", "total_reasoning_tokens", "mean_reasoning_tokens",
             "reasoning_tokens_source", "requests_with_tool_calls", "total_tool_call_events")

def _jsonable(value):
    """`value` as strict JSON can hold it: +-inf as "inf" / "-inf", NaN as None (JSON has
    neither, and strict readers refuse Python's `Infinity` / `NaN`)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if dataclasses.is_dataclass(value):
        return {k: _jsonable(v) for k, v in dataclasses.asdict(value).items()}
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def environment() -> dict:
    """Where the run happened: python, platform, cores, loadgen version."""
    here = machine(None)
    return {"python": sys.version.split()[0], "platform": here["platform"], "cpu_count": here["cpu_count"],
            "usable_cores": here["usable_cores"], "loadgen_version": __version__}


def _vllm_keys(summary: dict) -> dict:
    """vLLM's spellings of the keys loadgen names differently (`total_token_throughput`, `*_e2el_ms`)."""
    out = {"total_token_throughput": summary.get("total_throughput")}
    for key, value in summary.items():
        if "_e2e_latency_ms" in key:
            out[key.replace("_e2e_latency_ms", "_e2el_ms")] = value
    return out


def _detailed(result: RunResult) -> dict:
    """vLLM's --save-detailed lists, one entry per request (times in seconds, as vLLM writes them)."""
    recs = result.records
    t0 = min((r.intended_ns for r in recs), default=0)
    ttft = lambda r: None if r.first_token_ns is None else (r.first_token_ns - origin_ns(result.cfg, r)) / 1e9  # noqa: E731
    return {"input_lens": [input_tokens(r) for r in recs],
            "output_lens": [output_tokens(r) if r.ok else 0 for r in recs],
            "ttfts": [ttft(r) for r in recs],
            "itls": [[(b - a) / 1e9 for a, b in zip(r.chunk_ns, r.chunk_ns[1:], strict=False)] for r in recs],
            "start_times": [(r.start_ns - t0) / 1e9 for r in recs],
            "errors": [r.error_message or "" for r in recs]}


def result_dict(result: RunResult, dataset: dict, detailed: bool = False, metadata: dict | None = None,
                label: str | None = None, command: str | None = None) -> dict:
    """The `--output` JSON: SGLang-style flat keys and vLLM's where they differ, plus the workload
    (`command`: the command line that ran it, None from the library), config, environment and the
    summary; `detailed` adds vLLM's per-request lists."""
    cfg = result.cfg
    flat = {
        "backend": cfg.backend, "model_id": result.model, "base_url": cfg.base_url,
        "dataset_name": dataset.get("name"), "request_rate": _jsonable(cfg.request_rate),
        "max_concurrency": cfg.concurrency, "burstiness": _jsonable(cfg.burstiness),
        "loadgen_version": __version__, "interrupted": result.interrupted, "transport": cfg.effective_transport,
        "client_bound": result.summary["client_bound"],
    }
    flat.update({k: v for k, v in result.summary.items() if not isinstance(v, dict)})
    flat.update(_vllm_keys(result.summary))
    flat.update({"num_prompts": len(result.records), "label": label, "date": time.strftime("%Y%m%d-%H%M%S"),
                 "tokenizer_id": dataset.get("tokenizer_path")})
    flat.update(metadata or {})
    if detailed:
        flat.update(_detailed(result))
    flat["workload"] = _jsonable(workload(result, dataset, command))
    flat["config"] = _jsonable(cfg)
    flat["dataset"] = dataset
    flat["environment"] = environment()
    flat["summary"] = _jsonable(result.summary)
    flat["timeline"] = _jsonable(result.timeline)
    flat["cdf"] = result.cdf
    flat["server_metrics"] = _jsonable(result.server_metrics)
    return flat


def write_json(path: str, data: dict) -> None:
    """Write the results JSON."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump(_jsonable(data), f, indent=2)


def save_result(data: dict, result_dir: str | None, filename: str | None, append: bool) -> str:
    """vLLM's --save-result: `result_dir/filename` (a vLLM-style name by default); returns the path."""
    if filename is None:
        conc = f"-concurrency{data['max_concurrency']}" if data.get("max_concurrency") else ""
        model = os.path.basename(str(data.get("model_id") or "model").rstrip("/"))
        filename = f"{data.get('label') or data['backend']}-{data['request_rate']}qps{conc}-{model}-{data['date']}.json"
    path = os.path.join(result_dir or ".", filename)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "a" if append else "w", encoding="utf-8") as f:
        if append and f.tell() > 0:
            f.write("\n")
        json.dump(_jsonable(data), f)
    return path


SERVER_TIMING_FIELDS = tuple(name for name in RequestRecord.__struct_fields__ if name.startswith("server_"))


def write_records(path: str, result: RunResult) -> None:
    """One JSON line per request; times in ms from the run's first intended start (`clock_t0_ns`
    on the perf_counter_ns clock, so rows line up with other processes' stamps on this machine).

    `ttft_ms` and `e2e_latency_ms` start where the summary's do (see `origin_ns`)."""
    t0 = min((r.intended_ns for r in result.records), default=0)
    ms = lambda ns: None if ns is None else (ns - t0) / 1e6  # noqa: E731
    with open(path, "w", encoding="utf-8") as f:
        for r in result.records:
            row = {
                "index": r.index, "worker": r.worker, "ok": r.ok, "error_class": r.error_class,
                "error_message": r.error_message, "intended_ms": ms(r.intended_ns),
                "start_ms": ms(r.start_ns), "first_token_ms": ms(r.first_token_ns), "end_ms": ms(r.end_ns),
                "ttft_ms": None if r.first_token_ns is None else (r.first_token_ns - origin_ns(result.cfg, r)) / 1e6,
                "e2e_latency_ms": (r.end_ns - origin_ns(result.cfg, r)) / 1e6,
                "input_tokens": input_tokens(r), "output_tokens": output_tokens(r),
                "usage_prompt_tokens": r.usage_prompt_tokens,
                "usage_completion_tokens": r.usage_completion_tokens,
                "usage_cached_tokens": r.usage_cached_tokens,
                "client_output_tokens": r.client_output_tokens, "num_empty_text_events": r.num_empty_text_events,
                "chunk_ms": [ms(t) for t in r.chunk_ns], "session": r.session, "turn": r.turn,
                "ttft_uncertainty_ms": None if r.ttft_uncertainty_ns is None else r.ttft_uncertainty_ns / 1e6,
                "num_coalesced_events": r.num_coalesced_events, "clock_t0_ns": t0,
                "request_bytes": r.request_bytes, "num_embeddings": r.num_embeddings,
                "url_index": r.url_index, "model_index": r.model_index,
                **{name: getattr(r, name) for name in SERVER_TIMING_FIELDS},
                **_kind_row(r, ms, origin_ns(result.cfg, r)),
            }
            f.write(json.dumps(_jsonable(row)) + "\n")


def _kind_row(r: RequestRecord, ms, t0: int) -> dict:
    """A record row's reasoning and tool-call figures (README "Reasoning and tool calls")."""
    since = lambda ns: None if ns is None else (ns - t0) / 1e6  # noqa: E731
    return {"ttfo_ms": since(r.first_answer_ns), "ttf_tool_call_ms": since(r.first_tool_call_ns),
            "first_reasoning_ms": ms(r.first_reasoning_ns), "last_reasoning_ms": ms(r.last_reasoning_ns),
            "num_reasoning_events": r.num_reasoning_events, "reasoning_event_tokens": r.reasoning_event_tokens,
            "usage_reasoning_tokens": r.usage_reasoning_tokens, "num_tool_call_events": r.num_tool_call_events}


def fmt(value, spec: str = "{:,.2f}") -> str:
    """A cell, in the one number format: '-' for None, true/false for a boolean, an integer with
    thousands separators (where `spec` is a fixed-point one), a float through `spec`, else str."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int) and spec.endswith("f}"):
        return f"{value:,}"
    return spec.format(value) if isinstance(value, int | float) else str(value)
