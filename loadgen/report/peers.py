"""The peers' result files read like loadgen's: `vllm bench serve --save-result` (one JSON object,
one per line with `--append-result`) and SGLang `bench_serving --output-file` (one JSON line per run).

`provenance(data)` says which tool made a file; `as_run(data, tool)` maps its fields by name onto
loadgen's keys (`total_token_throughput` -> `total_throughput`, `p99_e2el_ms` ->
`p99_e2e_latency_ms`, `max_concurrency` -> `config.concurrency`), draws the CDFs and, where the
file has per-request start times, the timeline from its per-request lists, and keeps every other
field under `provenance.also`, so nothing in a file goes unshown. Rows whose definitions differ
between the tools carry a note (`provenance.notes`), shown on the page and by `compare`.

The field sets are vLLM 0.32.0's (vllm/benchmarks/serve.py: `benchmark()`'s result, `main()`'s
header and `--metadata`, the lists `--save-detailed` keeps) and SGLang's single-file
`python/sglang/bench_serving.py` (`benchmark()`'s result, `--output-details`' result_details); a
field either tool adds later lands in `provenance.also`. The files are checked by
`runfile.load_runs` before they get here.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import re
from dataclasses import dataclass, field

import numpy as np

from loadgen.measure.metrics import distribution
from loadgen.measure.timeline import Stamps, buckets, cdf_points
from loadgen.plan.config import DEFAULT_PERCENTILES

#: A latency statistic: `mean_ttft_ms`, `p99.9_itl_ms`, `std_e2el_ms`, `max_itl_ms`.
LATENCY_KEY = re.compile(r"(mean|median|std|max|p\d+(?:\.\d+)?)_([a-z][a-z0-9_]*?)_ms")
#: Tokens per second in the busiest second, and requests at once: the same 1-s buckets in both peers
#: (vLLM serve.py `calculate_metrics`, SGLang `calculate_metrics`).
PEAK_NOTES = {
    "max_output_tokens_per_s": "{tool}: chunks (the first and one per ITL gap, each counted as a token) "
                               "in the busiest 1-s bucket; loadgen: output tokens in it",
    "max_concurrent_requests": "{tool}: most successful requests active at some time within one 1-s "
                               "bucket; loadgen: most requests in flight at one instant",
}
#: Latency metrics shown in `compare` and the report's summary, in this order: loadgen's, then vLLM's own.
LATENCY_METRICS = ("ttft", "tpot", "itl", "e2e_latency", "client_queue_time", "e2el_including_client_queue",
                   "ttfo", "reasoning_duration", "ttf_tool_call")
#: The longest span of per-request times drawn as a timeline, and the most buckets it gets.
MAX_TIMELINE_SPAN_S, MAX_TIMELINE_BUCKETS = 1e8, 2000


@dataclass(frozen=True)
class Tool:
    """A peer's file: how to recognise it and where each of its fields goes."""

    name: str
    #: file key -> loadgen's flat key (same meaning, maybe another definition: see `notes`)
    rows: dict[str, str]
    #: file key -> key in the run's `config` (the page's "Flags" table)
    config: dict[str, str]
    #: the file's spelling of a latency metric -> loadgen's (`e2el` -> `e2e_latency`)
    metrics: dict[str, str]
    #: loadgen key or metric name -> how the tool defines it, where that differs from loadgen
    notes: dict[str, str]
    #: lists with one entry per request
    per_request: tuple[str, ...]
    #: why a file has no timeline, or no per-request times at all; how its tool stamps events
    no_timeline: str
    no_cdf: str
    stamps: str
    header: dict[str, str] = field(default_factory=lambda: {"date": "date", "model_id": "model_id",
                                                            "backend": "backend"})


VLLM = Tool(
    name="vllm bench serve",
    rows={k: k for k in ("duration", "completed", "failed", "total_input_tokens", "total_output_tokens",
                         "request_throughput", "request_goodput", "output_throughput",
                         "max_output_tokens_per_s", "max_concurrent_requests")}
    | {"total_token_throughput": "total_throughput"},
    config={"max_concurrency": "concurrency", "request_rate": "request_rate", "burstiness": "burstiness",
            "num_prompts": "num_prompts", "ramp_up_strategy": "ramp_up_strategy",
            "ramp_up_start_rps": "ramp_up_start_rps", "ramp_up_end_rps": "ramp_up_end_rps",
            "endpoint_type": "endpoint_type", "tokenizer_id": "tokenizer_id"},
    metrics={"e2el": "e2e_latency"},
    notes={
        "ttft": "vLLM: to the first chunk with `choices`, the role-only chunk included "
                "(lib/endpoint_request_func.py); loadgen: to its first token event",
        "itl": "vLLM: one gap per chunk with `choices`, empty-text and finish chunks included",
        "tpot": "vLLM: (last chunk with `choices` - first such chunk) / (output tokens - 1)",
        "e2e_latency": "vLLM (e2el): from the send to the last chunk with `choices`; loadgen: to the "
                       "response's last bytes, from the intended send in rate mode",
        "total_output_tokens": "vLLM: the usage's completion_tokens, else the text re-encoded",
        "concurrency": "derived by loadgen from `latencies`: sum of vLLM's E2E latencies / duration",
        "input_throughput": "derived by loadgen: total input tokens / duration",
        "client_queue_time": "vLLM only: time a request waited for --max-concurrency in the client",
        "e2el_including_client_queue": "vLLM only: E2E latency plus the client queue time",
        **{k: v.format(tool="vLLM") for k, v in PEAK_NOTES.items()},
    },
    per_request=("input_lens", "output_lens", "ttfts", "itls", "latencies", "start_times", "queue_times",
                 "generated_texts", "errors"),
    no_timeline="vllm bench serve writes per-request start times only with --save-detailed: "
                "no timeline in this file",
    no_cdf="no per-request times in this file (vllm bench serve writes them with --save-detailed): no CDF",
    stamps="vllm bench serve: time.perf_counter() when its event loop parsed each chunk",
    header={"date": "date", "model_id": "model_id", "backend": "backend", "label": "label"},
)
SGLANG = Tool(
    name="SGLang bench_serving",
    rows={k: k for k in ("duration", "completed", "total_input_tokens", "total_output_tokens",
                         "total_output_tokens_retokenized", "request_throughput", "input_throughput",
                         "output_throughput", "total_throughput", "concurrency", "max_output_tokens_per_s",
                         "max_concurrent_requests")},
    config={"max_concurrency": "concurrency", "request_rate": "request_rate", "dataset_name": "dataset_name",
            "sharegpt_output_len": "sharegpt_output_len", "random_input_len": "random_input_len",
            "random_output_len": "random_output_len", "random_range_ratio": "random_range_ratio"},
    metrics={},
    notes={
        "ttft": "SGLang: to the first chunk with non-empty text (`delta.content`, `text`)",
        "itl": "SGLang: gaps between chunks with non-empty text (with speculative decoding on "
               "sglang-oai backends, each gap split over the chunk's re-encoded tokens)",
        "tpot": "SGLang: (E2E latency - TTFT) / (output tokens - 1)",
        "e2e_latency": "SGLang: from the send to the last line read; loadgen: from the intended send "
                       "in rate mode",
        "total_output_tokens": "SGLang: the usage's completion_tokens, else the requested output length",
        "failed": "derived by loadgen: entries of `errors` that are not empty",
        **{k: v.format(tool="SGLang") for k, v in PEAK_NOTES.items()},
    },
    per_request=("input_lens", "output_lens", "ttfts", "itls", "generated_texts", "errors"),
    no_timeline="SGLang bench_serving writes no per-request start times: no timeline in this file",
    no_cdf="no per-request times in this file (SGLang bench_serving writes them with --output-details): no CDF",
    stamps="SGLang bench_serving: time.perf_counter() when its event loop read each line",
    header={"backend": "backend", "tag": "label"},
)
TOOLS = {"vllm": VLLM, "sglang": SGLANG}
#: The note on a statistic loadgen computed from a peer file's per-request lists.
DERIVED_FROM_LISTS = ("derived by loadgen from {name}'s per-request lists (successful requests; "
                      "numpy's linear percentiles, as both tools compute theirs)")
#: Top-level keys whose value may be JSON's missing `Infinity` (SGLang's default request rate).
INFINITY_KEYS = frozenset({"request_rate"})


def tool_of(data: dict) -> str:
    """'loadgen', 'vllm', 'sglang' or 'unknown', from the file's fields."""
    if "loadgen_version" in data or data.get("kind") == "sweep":
        return "loadgen"
    if {"endpoint_type", "total_token_throughput"} & data.keys() or any(k.endswith("_e2el_ms") for k in data):
        return "vllm"
    if ({"total_output_tokens_retokenized", "accept_length", "concurrency", "server_info"} & data.keys()
            or any(k.endswith("_e2e_latency_ms") for k in data)):
        return "sglang"
    return "unknown"


#: What each token-event rule takes (loadgen/README.md, "Token events").
RULE_NOTES = {"loadgen": "every event with a text field, empty text too; no role or finish announcement",
              "vllm": "vllm bench serve's: every event with choices (TTFT at the role chunk)",
              "sglang": "SGLang bench_serving's: events with non-empty text only"}


def token_events(run: dict) -> str:
    """Which events a run counted as token events: its rule, and for loadgen how many had empty text.
    A peer's file follows its tool's rule; a loadgen file from before the rule existed, SGLang's."""
    tool = (run.get("provenance") or {}).get("tool", "loadgen")
    rule = run.get("token_event_rule") if tool == "loadgen" else tool
    if rule not in RULE_NOTES:
        return "sglang rule: events with non-empty text only (loadgen before --token-events)"
    text = f"{rule} rule: {RULE_NOTES[rule]}"
    if isinstance(empty := run.get("num_empty_text_events"), int | float) and not isinstance(empty, bool):
        text += f"; {empty:,.0f} with empty text"
    return text


def made_by(tool: str, data: dict) -> str:
    """The tool that wrote a file, in words."""
    if tool == "loadgen":
        return f"loadgen {data.get('loadgen_version') or '(no version in the file)'}"
    if tool == "vllm":
        return "vllm bench serve (fields as vLLM 0.32.0 writes them)"
    if tool == "sglang":
        return "SGLang bench_serving (from its fields)"
    return "unknown (neither loadgen's, vLLM's nor SGLang's fields)"


def as_run(data: dict, tool: str, plots: bool = True) -> dict:
    """A peer's file (`tool` 'vllm' or 'sglang') as a loadgen run: loadgen's keys, `config`,
    `provenance` (who made it, notes, every other field) and, with `plots`, `cdf` and `timeline`
    from its per-request lists (and why a plot has no data)."""
    spec = TOOLS[tool]
    run: dict = {}
    placed: dict[str, str] = {}
    for key, value in data.items():
        target = _target(spec, key)
        if target is None:
            continue
        placed[key] = target
        if target.startswith("config."):
            run.setdefault("config", {})[target.removeprefix("config.")] = value
        else:
            run[target] = value
    requests = _Requests(data, spec)
    run.update(requests.derived(run))
    from_lists = requests.missing_statistics(run)
    run.update(from_lists)
    notes = {k: v for k, v in spec.notes.items() if _has(run, k)}
    for key in from_lists:
        metric = LATENCY_KEY.fullmatch(key)[2]
        notes[key] = "; ".join(filter(None, (DERIVED_FROM_LISTS.format(name=spec.name), spec.notes.get(metric))))
    run["provenance"] = {
        "tool": tool, "made_by": made_by(tool, data), "stamps": spec.stamps, "fields": placed,
        "notes": notes,
        "also": {k: v for k, v in data.items() if k not in placed},
    }
    if plots:
        _add_plots(run, requests, spec)
    return run


def _add_plots(run: dict, requests: _Requests, spec: Tool) -> None:
    """`cdf` and `timeline` from the per-request lists, and why a plot has no data."""
    run["cdf"] = requests.cdf()
    timeline = requests.timeline()
    if timeline is not None:
        run["timeline"] = timeline
    run["provenance"].update(
        no_cdf=requests.why_no_cdf(spec),
        no_timeline=None if timeline is not None else requests.why_no_timeline or spec.no_timeline,
        timeline_note="per-second counts are chunks with `choices` (vLLM counts each as a token)"
        if timeline is not None else None)


def _target(spec: Tool, key: str) -> str | None:
    """Where a file's field goes: a loadgen key, `config.<key>`, or None (kept in `also`)."""
    if key in spec.rows:
        return spec.rows[key]
    if key in spec.header:
        return spec.header[key]
    if key in spec.config:
        return "config." + spec.config[key]
    if (m := LATENCY_KEY.fullmatch(key)) is not None:
        return f"{m[1]}_{spec.metrics.get(m[2], m[2])}_ms"
    return None


def _has(run: dict, note_key: str) -> bool:
    """Whether a note's row is in the run: a key, or a metric with some statistic."""
    return note_key in run or any((m := LATENCY_KEY.fullmatch(k)) and m[2] == note_key for k in run)


def note_for(run: dict, key: str) -> str | None:
    """The note on `key` (a loadgen key) for this run: how its tool defines it where that differs,
    or that its tool's file lacks it; None for loadgen's own files."""
    prov = run.get("provenance") or {}
    if prov.get("tool") not in TOOLS:
        return None
    name = TOOLS[prov["tool"]].name
    if run.get(key) is None:
        return f"null in {name}'s file" if key in prov["fields"].values() else f"not in {name}'s file"
    m = LATENCY_KEY.fullmatch(key)
    return prov["notes"].get(key) or (prov["notes"].get(m[2]) if m else None)


def latency_keys(runs: list[dict]) -> list[str]:
    """Every statistic of LATENCY_METRICS that some run holds, by metric, then mean, median, std,
    percentiles in order, max."""
    order = {"mean": -3.0, "median": -2.0, "std": -1.0, "max": 1000.0}
    found = {k for run in runs for k in run if (m := LATENCY_KEY.fullmatch(k)) and m[2] in LATENCY_METRICS}

    def rank(key: str) -> tuple[int, float]:
        stat, metric = LATENCY_KEY.fullmatch(key).groups()
        return LATENCY_METRICS.index(metric), order.get(stat, float(stat[1:]) if stat[0] == "p" else 0.0)

    return sorted(found, key=rank)


class Notes:
    """Footnotes numbered in order of first use: `ref(text)` is a cell's marker, `lines()` the list."""

    def __init__(self) -> None:
        self.numbers: dict[str, int] = {}

    def ref(self, text: str | None) -> str:
        """' [n]' for `text` (numbered at its first use), '' for None."""
        if not text:
            return ""
        return f" [{self.numbers.setdefault(text, len(self.numbers) + 1)}]"

    def lines(self) -> list[str]:
        return [f"[{n}] {text}" for text, n in self.numbers.items()]


def unshown(run: dict, shown: set[str]) -> dict:
    """A peer file's fields that reach none of the `shown` keys: those mapped elsewhere (the
    header, `config`) and those kept as they are; {} for loadgen's own files."""
    prov = run.get("provenance") or {}
    if prov.get("tool") not in TOOLS:
        return {}
    out = {k: run.get(t) if not t.startswith("config.") else run["config"].get(t[7:])
           for k, t in prov["fields"].items() if t not in shown}
    return out | prov["also"]


def brief(value, limit: int = 120) -> str:
    """A field's value in one short line: numbers, short text and short lists as they are, longer
    lists by size (`list of 8 numbers`, `list of 8 strings (1 not empty)`), anything past `limit` cut."""
    if isinstance(value, list) and (len(value) > 16 or len(text := _json(value)) > limit):
        kinds = {type(v).__name__ for v in value}
        if kinds == {"str"}:
            return f"list of {len(value)} strings ({sum(1 for v in value if v)} not empty)"
        if kinds == {"list"}:
            return f"list of {len(value)} lists ({sum(len(v) for v in value)} values in all)"
        return f"list of {len(value)} " + ("numbers" if kinds <= {"int", "float"} else "values")
    text = value if isinstance(value, str) else _json(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _json(value) -> str:
    return json.dumps(value, separators=(",", ":"), default=str)


class _Requests:
    """A peer file's per-request lists (checked to be of equal length), and what they allow."""

    def __init__(self, data: dict, spec: Tool) -> None:
        self.lists = {k: data[k] for k in spec.per_request if isinstance(data.get(k), list)}
        self.count = len(next(iter(self.lists.values()), []))
        self.ok = self._outcomes(data)
        self.why_no_timeline: str | None = None

    def _outcomes(self, data: dict) -> np.ndarray | None:
        """Which requests succeeded: from `errors` (empty text: ok), else all when none failed."""
        if "errors" in self.lists:
            return np.asarray([not e for e in self.lists["errors"]], dtype=bool)
        if data.get("failed") == 0 or (data.get("failed") is None and data.get("completed") == self.count):
            return np.ones(self.count, dtype=bool)
        return None

    def _values(self, name: str) -> np.ndarray | None:
        if name not in self.lists or self.ok is None:
            return None
        return np.asarray(self.lists[name], dtype=np.float64)

    def derived(self, run: dict) -> dict:
        """Figures loadgen shows that the tool's file lacks but its lists or totals give."""
        out = {}
        duration = run.get("duration")
        if run.get("failed") is None and self.ok is not None and "errors" in self.lists:
            out["failed"] = int((~self.ok).sum())
        if duration and run.get("input_throughput") is None and run.get("total_input_tokens") is not None:
            out["input_throughput"] = run["total_input_tokens"] / duration
        if duration and run.get("concurrency") is None and (lat := self._values("latencies")) is not None:
            out["concurrency"] = float(lat[self.ok].sum()) / duration
        return out

    def missing_statistics(self, run: dict) -> dict:
        """The statistics loadgen shows by default (mean, median, std, its default percentiles, max)
        of each latency the lists give, where the file itself lacks them."""
        out = {}
        for name, values in self.latencies_ms.items():
            if values.size:
                stats = distribution(name, values, DEFAULT_PERCENTILES)
                out.update({k: v for k, v in stats.items() if run.get(k) is None})
        return out

    @functools.cached_property
    def latencies_ms(self) -> dict[str, np.ndarray]:
        """The successful requests' TTFT, ITL, TPOT and E2E values (ms) the lists give."""
        out = {}
        ttft, lat, lens = self._values("ttfts"), self._values("latencies"), self._values("output_lens")
        if ttft is not None:
            out["ttft"] = ttft[self.ok] * 1e3
        if "itls" in self.lists and self.ok is not None:
            gaps = [g for g, ok in zip(self.lists["itls"], self.ok, strict=True) if ok]
            out["itl"] = np.fromiter(itertools.chain.from_iterable(gaps), np.float64) * 1e3
        if lat is not None:
            out["e2e_latency"] = lat[self.ok] * 1e3
        if lat is not None and ttft is not None and lens is not None:
            many = self.ok & (lens > 1)
            out["tpot"] = (lat[many] - ttft[many]) / (lens[many] - 1) * 1e3
        return out

    def cdf(self) -> dict:
        """CDF points of each latency the lists give (absent or empty ones are missing keys)."""
        return {f"{name}_ms": cdf_points(values) for name, values in self.latencies_ms.items() if values.size}

    def why_no_cdf(self, spec: Tool) -> str | None:
        if any(values.size for values in self.latencies_ms.values()):
            return None
        if self.lists and self.ok is None:
            return "no per-request outcome in this file (some failed, and it has no `errors`): no CDF"
        if self.lists and self.ok is not None and not self.ok.any():
            return "no request succeeded: no CDF"
        return spec.no_cdf

    def timeline(self) -> dict | None:
        """Buckets like loadgen's from start_times, ttfts, itls and latencies (vLLM's --save-detailed),
        time 0 at the first start; None without them or past MAX_TIMELINE_SPAN_S."""
        names = ("start_times", "ttfts", "itls", "latencies")
        if self.ok is None or not self.count or any(n not in self.lists for n in names):
            return None
        start, ttft, lat = (np.asarray(self.lists[n], dtype=np.float64) for n in ("start_times", "ttfts", "latencies"))
        start, ok = start - start.min(), self.ok
        events = [s + t + np.concatenate([[0.0], np.cumsum(g)]) for s, t, g, good
                  in zip(start, ttft, self.lists["itls"], ok, strict=True) if good]
        event_at = np.concatenate(events) if events else np.zeros(0)
        gap_at = np.concatenate([e[1:] for e in events]) if events else np.zeros(0)
        del events
        span = max(float((start + lat).max()), float(event_at.max()) if event_at.size else 0.0)
        if span > MAX_TIMELINE_SPAN_S:
            self.why_no_timeline = f"its per-request times span {span:.3g} s: no timeline drawn"
            return None
        interval = max(1.0, math.ceil(span / MAX_TIMELINE_BUCKETS))
        ns = lambda s: (np.asarray(s) * 1e9).astype(np.int64)  # noqa: E731
        stamps = Stamps(starts=ns(start), ends=ns(start + lat), failed=~ok, first_at=ns(start[ok] + ttft[ok]),
                        ttft_ms=ttft[ok] * 1e3, event_at=ns(event_at), event_tokens=np.ones(event_at.size),
                        gap_at=ns(gap_at), gap_ms=self.latencies_ms["itl"])
        return {"interval_s": interval, "buckets": buckets(stamps, interval), "steady_state": None}
