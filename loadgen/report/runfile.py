"""Saved run and sweep files read back for `loadgen report` and `loadgen compare`: loadgen's, and
the peers' (`vllm bench serve --save-result`, SGLang `bench_serving --output-file`, see peers.py).

A file is read with the bounded reader (`jsonfile.read_json_values`: one JSON document, or JSON
Lines, one run per line), then every field that `report` or `compare` reads is checked against the
type they expect (RUN, SWEEP, VLLM, SGLANG, and every latency statistic `*_ms` as a number), so a
file with a field of the wrong type is one line naming the file and the field, never a traceback.
Fields they do not read are not checked (a peer's are shown as text); any field may be missing or
null (older files lack some) unless marked `Req`.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass

from loadgen.report import peers
from loadgen.report.jsonfile import read_json_values

SWEEP_VARIABLES = ("concurrency", "request_rate")
#: No count, rate, time or latency a run measures comes near this; past it matplotlib cannot draw an axis.
MAX_NUMBER = 1e15
_PLAIN_KEY = re.compile(r"[\w.%-]{1,60}", re.ASCII)


@dataclass(frozen=True)
class Kind:
    """A leaf type: its name in messages and its test; `many`, a faster test of a whole list of
    them (a list it fails is then looked at item by item, for the message)."""

    name: str
    test: Callable[[object], bool]
    many: Callable[[list], bool] | None = None


@dataclass(frozen=True)
class Req:
    """A field that must be present and not null."""

    spec: object


@dataclass(frozen=True)
class MapOf:
    """An object with any keys, each value of `spec`."""

    spec: object


@dataclass(frozen=True)
class Opt:
    """A list item or map value that may be null."""

    spec: object


def _is_num(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and abs(value) <= MAX_NUMBER


def _is_interval(value) -> bool:
    """`{mean, low, high}` as `sweep.stats.interval` writes it: low and high both null, or numbers
    with low <= mean <= high."""
    if not isinstance(value, dict) or not _is_num(mean := value.get("mean")):
        return False
    low, high = value.get("low"), value.get("high")
    return (low is None and high is None) or (_is_num(low) and _is_num(high) and low <= mean <= high)


def _are_nums(values: list, low: float = -MAX_NUMBER) -> bool:
    """Every value an int or float (not a bool) within [low, MAX_NUMBER]: one pass each for the
    types and the range, where a per-item test costs seconds on a long per-request list."""
    return all(type(v) is float or type(v) is int for v in values) and (
        not values or (min(values) >= low and max(values) <= MAX_NUMBER))


NUM = Kind(f"a number within ±{MAX_NUMBER:g}", _is_num, _are_nums)
NONNEG = Kind(f"a number within 0..{MAX_NUMBER:g}", lambda v: _is_num(v) and v >= 0,
              lambda values: _are_nums(values, 0))
RATE = Kind('a number, Infinity, "inf" or "trace"', lambda v: _is_num(v) or v in (float("inf"), "inf", "trace"))
STR = Kind("a string", lambda v: isinstance(v, str))
BOOL = Kind("true or false", lambda v: isinstance(v, bool))
OBJECT = Kind("an object", lambda v: isinstance(v, dict))
INTERVAL = Kind("an interval (a number mean; low and high null, or numbers around the mean)", _is_interval)
VARIABLE = Kind(" or ".join(SWEEP_VARIABLES), lambda v: v in SWEEP_VARIABLES)

#: Flat keys `report` and `compare` show as numbers.
NUMBER_KEYS = (
    "completed", "failed", "duration", "total_input_tokens", "total_output_tokens", "total_output_tokens_client",
    "total_output_tokens_retokenized", "output_tokens_usage_minus_client", "request_throughput",
    "input_throughput", "output_throughput", "total_throughput", "max_output_tokens_per_s", "concurrency",
    "max_concurrent_requests", "request_goodput", "num_empty_text_events", "cancelled",
    *(f"{stat}_{name}_ms" for stat in ("mean", "median", "p99")
      for name in ("ttft", "tpot", "itl", "e2e_latency")),
)
QUANTILES = {"p50": NUM, "p99": NUM}
#: The client verdict's figures `report` shows (see measure/client_health.py).
HEALTH_NUMBERS = ("coalesced_share", "uncertain_event_share", "ttft_exact_share", "ttft_uncertainty_p99_ms",
                  "ttft_uncertainty_max_ms", "ttft_tolerance_ms", "clock_steps", "max_clock_step_ms")
#: One scraped target's block that `report` reads (`server_metrics` and each of its `others`).
TARGET = {"status": STR, "url": STR, "dialect": STR, "scrapes": NUM, "failed_scrapes": NUM, "last_failure": STR,
          "run": MapOf(Opt(NUM)), "all_series": {"max_series": NUM, "num_series": NUM, "num_dropped": NUM}}
RUN = {
    **dict.fromkeys(NUMBER_KEYS, NUM),
    **dict.fromkeys(("label", "kind", "date", "base_url", "model_id", "backend", "transport",
                     "loadgen_version", "output_tokens_per_event_source", "token_event_rule"), STR),
    "client_bound": BOOL, "config": OBJECT, "environment": OBJECT,
    "workload": {
        **dict.fromkeys(("command", "dataset", "convention", "token_event_rule", "mode", "stamps"), STR),
        **dict.fromkeys(("input_tokens", "output_tokens"), {"mean": NUM, "min": NUM, "max": NUM}),
        **dict.fromkeys(("concurrency", "num_prompts", "duration_s", "warmup"), NUM), "request_rate": RATE,
        "machine": {**dict.fromkeys(("cpu_count", "usable_cores", "load_avg_1m"), NUM), "platform": STR},
    },
    "summary": {
        "client_health": {"client_bound_reasons": [STR], "client_health_notes": [STR], "client_bound_cause": STR,
                          "stamp_source": STR, **dict.fromkeys(HEALTH_NUMBERS, NUM),
                          "client_delay": {"reads": NUM, "mean_ms": NUM, "p50_ms": NUM, "p99_ms": NUM, "max_ms": NUM},
                          "drain": {"full_reads": NUM, "window_full_reads": NUM, "max_queued_bytes": NUM},
                          "refill": {"refill_lag_p50_ms": NUM, "refill_lag_p99_ms": NUM, "idle_share": NUM},
                          "workers": [{"worker": NUM, "cpu_share": NUM, "run_wait_share": NUM,
                                       "run_wait_p99_ms": NUM, "involuntary_switches": NUM}]},
        "server_vs_client": {"rows": [{"name": STR, "server": NUM, "client": NUM, "ratio": NUM}],
                             "margin": NUM, "notes": [STR]},
        "ttft_split": {"requests": NUM, **{f"{stat}_ms": MapOf(Opt(NUM)) for stat in ("mean", "p50", "p99")}},
        "energy": MapOf(Opt(NUM)),
    },
    "timeline": {"interval_s": NUM, "steady_state": {"start_s": NUM, "end_s": NUM},
                 "buckets": [{"t_s": NUM, "output_tok_s": NUM, "in_flight": NUM, "ttft_ms": QUANTILES,
                              "itl_ms": QUANTILES}]},
    "cdf": MapOf([[NUM]]),
    "server_metrics": {**TARGET, "series": {"t_s": [NUM], "running": [Opt(NUM)], "waiting": [Opt(NUM)],
                                            "kv_usage": [Opt(NUM)]}, "others": [TARGET]},
}
#: vLLM 0.32.0's `--save-result` fields that `report` and `compare` read (serve.py, see peers.py).
VLLM = {
    **dict.fromkeys(("date", "endpoint_type", "backend", "label", "model_id", "tokenizer_id", "ramp_up_strategy"),
                    STR),
    **dict.fromkeys(("num_prompts", "burstiness", "max_concurrency", "ramp_up_start_rps", "ramp_up_end_rps",
                     "duration", "completed", "failed", "total_input_tokens", "total_output_tokens",
                     "request_throughput", "request_goodput", "output_throughput", "total_token_throughput",
                     "max_output_tokens_per_s", "max_concurrent_requests"), NUM),
    "request_rate": RATE,
    **dict.fromkeys(("input_lens", "output_lens", "ttfts", "latencies", "queue_times"), [NONNEG]),
    "start_times": [NUM], "itls": [[NONNEG]], "generated_texts": [STR], "errors": [STR],
}
#: SGLang bench_serving's `--output-file` fields that `report` and `compare` read (see peers.py).
SGLANG = {
    **dict.fromkeys(("tag", "backend", "dataset_name"), STR), "request_rate": RATE,
    **dict.fromkeys(("max_concurrency", "sharegpt_output_len", "random_input_len", "random_output_len",
                     "random_range_ratio", "duration", "completed", "total_input_tokens",
                     "total_output_tokens", "total_output_tokens_retokenized", "request_throughput",
                     "input_throughput", "output_throughput", "total_throughput", "concurrency",
                     "max_output_tokens_per_s", "max_concurrent_requests"), NUM),
    **dict.fromkeys(("input_lens", "output_lens", "ttfts"), [NONNEG]),
    "itls": [[NONNEG]], "generated_texts": [STR], "errors": [STR],
}
SCHEMAS = {"vllm": VLLM, "sglang": SGLANG}
POINT = {"value": Req(NUM), "phase": STR, "client_bound": BOOL, "metrics": Req(MapOf(Opt(INTERVAL))),
         "slo": {"verdict": Req(STR)}, "saturation": {"stop": BOOL}}
SWEEP = {
    "kind": STR, "variable": Req(VARIABLE), "repeats": Req(NUM), "label": STR, "slo": MapOf(Opt(NUM)),
    "slo_percentile": NUM, "rules": OBJECT, "points": Req([POINT]),
    "early_stop": {"stopped_at": NUM, "reason": STR, "not_run": [NUM]},
    "answer": {"text": Req(STR), "highest_passing": NUM, "bracket": [Opt(NUM)]},
}


class FieldError(ValueError):
    """A field of the wrong type; the message says where (`summary.ttft_split.mean_ms`) and what."""


def load_files(paths: list[str], plots: bool = True) -> tuple[list[str], list[dict]]:
    """Every run in `paths` in order, and its name (`load_runs`); ValueError naming the file for a
    bad one, or for sweeps mixed with single runs."""
    pairs = [pair for path in paths for pair in load_runs(path, plots)]
    names, runs = [name for name, _ in pairs], [run for _, run in pairs]
    check_kinds(runs, names)
    return names, runs


def load_runs(path: str, plots: bool = True) -> list[tuple[str, dict]]:
    """The runs in one saved file, each `(name, run)`: a run or sweep file is one run named by its
    file name; JSON Lines (SGLang's `--output-file`, `--append-result`) one per line, `name #N`.
    Each is checked (ValueError naming the file otherwise); a peer's is mapped onto loadgen's keys
    (peers.as_run; its plots' data only with `plots`); every run gets `provenance` (the tool that made it)."""
    values = read_json_values(path, infinity_keys=peers.INFINITY_KEYS)
    base = os.path.basename(path)
    return [(base if len(values) == 1 else f"{base} #{n}",
             _checked(value, path if len(values) == 1 else f"{path} #{n}", plots))
            for n, value in enumerate(values, 1)]


def _checked(data, where: str, plots: bool) -> dict:
    """One JSON value of a file checked as a run or sweep, or ValueError naming `where`."""
    if not isinstance(data, dict):
        raise ValueError(f"{where} is not a loadgen results file (--output): its JSON is "
                         f"{_json_kind(data)}, not an object")
    tool = peers.tool_of(data)
    spec = SWEEP if data.get("kind") == "sweep" else SCHEMAS.get(tool, RUN)
    try:
        check(data, {**spec, **{k: NUM for k in data if peers.LATENCY_KEY.fullmatch(k)}})
        if data.get("kind") == "sweep" and not data["points"]:
            raise FieldError("points is empty: the sweep finished no point")
        if tool in peers.TOOLS:
            _check_lengths(data, peers.TOOLS[tool].per_request)
    except FieldError as exc:
        raise ValueError(f"{where} is not a {_kind_name(data, tool)} file: {exc}") from None
    if tool in peers.TOOLS:
        return peers.as_run(data, tool, plots)
    return {**data, "provenance": {"tool": tool, "made_by": peers.made_by(tool, data)}}


def _check_lengths(data: dict, names: tuple[str, ...]) -> None:
    """FieldError unless the per-request lists present have one entry per request each."""
    sizes = {name: len(data[name]) for name in names if isinstance(data.get(name), list)}
    if len(set(sizes.values())) > 1:
        (a, na), *_, (b, nb) = sorted(sizes.items(), key=lambda kv: kv[1])
        raise FieldError(f"{a} has {na} entries but {b} has {nb} (one per request each)")


def check_kinds(runs: list[dict], names: list[str]) -> None:
    """ValueError naming the files when sweep files (`kind: sweep`) and single runs are mixed."""
    sweeps = [p for run, p in zip(runs, names, strict=True) if run.get("kind") == "sweep"]
    if sweeps and len(sweeps) != len(runs):
        single = [p for p in names if p not in sweeps]
        raise ValueError(f"cannot mix sweep files ({', '.join(sweeps)}) with single-run files "
                         f"({', '.join(single)}); give only sweeps or only runs")


def check(value, spec, where: str = "") -> None:
    """FieldError unless `value` fits `spec`: a Kind, an object (dict of field specs), a list ([spec]),
    MapOf, Opt or Req."""
    if isinstance(spec, Req | Opt):
        if value is None and isinstance(spec, Opt):
            return
        spec = spec.spec
    if isinstance(spec, Kind):
        if not spec.test(value):
            raise FieldError(f"{where or 'the file'} is {_json_kind(value)}, expected {spec.name}")
    elif isinstance(spec, list):
        _expect(value, list, "a list", where)
        if isinstance(spec[0], Kind) and spec[0].many is not None and spec[0].many(value):
            return
        for i, item in enumerate(value):
            check(item, spec[0], f"{where}[{i}]")
    elif isinstance(spec, MapOf):
        _expect(value, dict, "an object", where)
        for key, item in value.items():
            check(item, spec.spec, _join(where, key))
    else:
        _expect(value, dict, "an object", where)
        for key, field in spec.items():
            if value.get(key) is not None:
                check(value[key], field, _join(where, key))
            elif isinstance(field, Req):
                raise FieldError(f"{_join(where, key)} is missing")


def _expect(value, kind: type, name: str, where: str) -> None:
    if not isinstance(value, kind):
        raise FieldError(f"{where or 'the file'} is {_json_kind(value)}, expected {name}")


def _join(where: str, key: str) -> str:
    """`where.key`; a key that is not a plain name is quoted (and cut), so the message stays one line."""
    if not _PLAIN_KEY.fullmatch(key):
        key = json.dumps(key[:40] + ("..." if len(key) > 40 else ""))
    return f"{where}.{key}" if where else key


def _kind_name(data: dict, tool: str) -> str:
    if data.get("kind") == "sweep":
        return "loadgen sweep"
    return f"{peers.TOOLS[tool].name} results" if tool in peers.TOOLS else "loadgen results"


def _json_kind(value) -> str:
    """A value's JSON type, as a message says it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int | float):
        return f"the number {value:g}"
    for kind, name in ((str, "a string"), (list, "a list"), (dict, "an object")):
        if isinstance(value, kind):
            return name
    return type(value).__name__
