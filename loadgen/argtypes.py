"""Argparse type functions: every flag value is checked when parsed, so bad input is a usage error.

Each function takes the flag's text and returns the value, or raises `argparse.ArgumentTypeError`
with a message that says what is allowed (argparse then prints usage and exits 2).
"""

from __future__ import annotations

import argparse
import json
import math
import os
from urllib.parse import urlsplit

from loadgen.plan.config import SLO
from loadgen.report.compare import Bound


def _number(text: str, kind: type) -> float:
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {'an integer' if kind is int else 'a number'}") from None
    if kind is float and math.isnan(value):
        raise argparse.ArgumentTypeError("nan is not allowed")
    return value


def int_at_least(low: int):
    """An integer >= `low`."""
    def parse(text: str) -> int:
        value = _number(text, int)
        if value < low:
            raise argparse.ArgumentTypeError(f"{value} is below the minimum {low}")
        return value
    parse.__name__ = f"integer >= {low}"
    return parse


def positive_float(allow_inf: bool = False):
    """A number > 0 (finite unless `allow_inf`)."""
    def parse(text: str) -> float:
        value = _number(text, float)
        if value <= 0 or (math.isinf(value) and not allow_inf):
            raise argparse.ArgumentTypeError(f"{text!r} must be > 0" + ("" if allow_inf else " and finite"))
        return value
    parse.__name__ = "positive number"
    return parse


def float_between(low: float, high: float):
    """A number in [low, high]."""
    def parse(text: str) -> float:
        value = _number(text, float)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{text!r} must be in [{low:g}, {high:g}]")
        return value
    parse.__name__ = f"number in [{low:g}, {high:g}]"
    return parse


def nonneg_float(text: str) -> float:
    """A finite number >= 0."""
    value = _number(text, float)
    if value < 0 or math.isinf(value):
        raise argparse.ArgumentTypeError(f"{text!r} must be >= 0 and finite")
    return value


def finite_float(text: str) -> float:
    """Any finite number (sampling parameters: the server judges their range)."""
    value = _number(text, float)
    if math.isinf(value):
        raise argparse.ArgumentTypeError(f"{text!r} must be finite")
    return value


def fraction(text: str) -> float:
    """A number in [0, 1]."""
    value = _number(text, float)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text!r} must be in [0, 1]")
    return value


def workers(text: str) -> int | str:
    """`auto` or a worker count >= 1."""
    return "auto" if text == "auto" else int_at_least(1)(text)


def base_url(text: str) -> str:
    """An http:// or https:// URL with a host (trailing slash dropped)."""
    parts = urlsplit(text)
    try:
        port_ok = parts.port is None or 0 < parts.port < 65536
    except ValueError:
        port_ok = False
    if parts.scheme not in ("http", "https") or not parts.hostname or not port_ok:
        raise argparse.ArgumentTypeError(f"{text!r} is not http://HOST[:PORT] (or https://)")
    return text.rstrip("/")


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def weighted(parse_value):
    """`VALUE` or `VALUE=W` (issue 32: several --base-url, a --model mix): (the value through
    `parse_value`, its weight W > 0, default 1). Only a number after the last `=` is a weight."""
    weight_of = positive_float()

    def parse(text: str) -> tuple[str, float]:
        value, sep, weight = text.rpartition("=")
        if sep and _is_number(weight):
            return parse_value(value), weight_of(weight)
        return parse_value(text), 1.0
    parse.__name__ = "VALUE[=WEIGHT]"
    return parse


def percentiles(text: str) -> tuple[float, ...]:
    """Comma-separated percentiles, each in (0, 100]."""
    values = tuple(_number(x.strip(), float) for x in text.split(","))
    if any(not 0 < p <= 100 for p in values):
        raise argparse.ArgumentTypeError(f"{text!r}: each percentile must be in (0, 100]")
    return values


def _slo_of(bounds: list[tuple[str, float]]) -> SLO:
    """The SLO of (field, bound) pairs; ValueError when a field is bounded twice."""
    fields: dict[str, float] = {}
    for name, bound in bounds:
        if name in fields:
            raise ValueError(f"{name.removesuffix('_ms')} is bounded twice ({fields[name]:g} and {bound:g})")
        fields[name] = bound
    return SLO(**fields)


def slo(text: str) -> SLO:
    """`ttft=MS,tpot=MS,e2e=MS` (any subset, each key once), each bound > 0."""
    bounds = []
    for item in text.split(","):
        key, sep, value = item.partition("=")
        if not sep or key.strip() not in ("ttft", "tpot", "e2e"):
            raise argparse.ArgumentTypeError(f"{item!r}: expected ttft=MS, tpot=MS or e2e=MS")
        bounds.append((f"{key.strip()}_ms", positive_float()(value)))
    try:
        return _slo_of(bounds)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: {exc}") from None


def goodput_item(text: str) -> tuple[str, float]:
    """One vLLM `--goodput` item, `KEY:MS` with KEY ttft, tpot or e2el, the bound > 0."""
    key, sep, value = text.partition(":")
    names = {"ttft": "ttft_ms", "tpot": "tpot_ms", "e2el": "e2e_ms"}
    if not sep or key.strip() not in names:
        raise argparse.ArgumentTypeError(f"{text!r}: expected ttft:MS, tpot:MS or e2el:MS")
    return names[key.strip()], positive_float()(value)


def percentile_metrics(text: str) -> tuple[str, ...]:
    """vLLM's `--percentile-metrics`: metrics among ttft, tpot, itl, e2el (loadgen gives every one
    its percentiles, so any of them is accepted; vLLM's client-queue metrics are not measured)."""
    names = tuple(name.strip() for name in text.split(","))
    unknown = [name for name in names if name not in ("ttft", "tpot", "itl", "e2el")]
    if unknown:
        raise argparse.ArgumentTypeError(f"{text!r}: {', '.join(map(repr, unknown))} not among ttft, "
                                         "tpot, itl, e2el (the metrics loadgen measures)")
    return names


def run_slo(slo_flag: SLO, goodput_items: list[tuple[str, float]] | None) -> SLO:
    """The run's SLO: `--slo`, or vLLM's `--goodput` items (each key once); ValueError when a key
    repeats or both flags are given."""
    if goodput_items is None:
        return slo_flag
    if slo_flag.is_set:
        raise ValueError("give --slo or --goodput, not both (they set the same bounds)")
    try:
        return _slo_of(goodput_items)
    except ValueError as exc:
        raise ValueError(f"--goodput: {exc}") from None


def key_value(text: str) -> tuple[str, str]:
    """`KEY=VALUE` (vLLM's `--metadata`)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE")
    return key.strip(), value


def endpoint(text: str) -> str:
    """A URL path such as /v1/chat/completions."""
    if not text.startswith("/") or any(c.isspace() for c in text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a path starting with '/'")
    return text


def custom_output_len(text: str) -> int:
    """vLLM's `--custom-output-len`: a length >= 1, or -1 for each line's own `output_tokens`."""
    value = int_at_least(-1)(text)
    if value == 0:
        raise argparse.ArgumentTypeError("0 is not a length: give >= 1, or -1 for the file's output_tokens")
    return value


def header(text: str) -> tuple[str, str]:
    """`Name: value`."""
    name, sep, value = text.partition(":")
    if not sep or not name.strip() or any(c.isspace() for c in name.strip()):
        raise argparse.ArgumentTypeError(f"{text!r} is not 'Name: value'")
    return name.strip(), value.strip()


def json_object(text: str) -> dict:
    """A JSON object."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("must be a JSON object ({...})")
    return value


#: The largest --tools file read (tool schemas are small; this bounds a wrong path's cost).
MAX_TOOLS_FILE_BYTES = 1 << 20


def tools_file(text: str) -> list:
    """A JSON file holding a list of OpenAI tool definitions, each `{"type": "function",
    "function": {"name": ..., ...}}` (the chat request's `tools` field)."""
    from loadgen.report.jsonfile import JsonFileError, read_json

    try:
        tools = read_json(existing_file(text), max_bytes=MAX_TOOLS_FILE_BYTES)
    except JsonFileError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if not isinstance(tools, list) or not tools or not all(_is_tool(t) for t in tools):
        raise argparse.ArgumentTypeError(
            f"{text!r}: want a non-empty JSON list of {{\"type\": \"function\", \"function\": {{\"name\": ...}}}}")
    return tools


def _is_tool(tool) -> bool:
    function = tool.get("function") if isinstance(tool, dict) else None
    return tool.get("type") == "function" and isinstance(function, dict) and isinstance(function.get("name"), str)


def existing_file(text: str) -> str:
    """A path to a readable file."""
    if not os.path.isfile(text) or not os.access(text, os.R_OK):
        raise argparse.ArgumentTypeError(f"{text!r} is not a readable file")
    return text


def existing_path(text: str) -> str:
    """A readable file or directory."""
    if not os.path.exists(text) or not os.access(text, os.R_OK):
        raise argparse.ArgumentTypeError(f"{text!r} is not a readable file or directory")
    return text


def writable_path(text: str) -> str:
    """A file path whose folder exists and is writable (checked before the run, not after)."""
    folder = os.path.dirname(os.path.abspath(text))
    if os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"{text!r} is a folder, not a file path")
    if not os.path.isdir(folder):
        raise argparse.ArgumentTypeError(f"folder {folder!r} does not exist (create it first)")
    if not os.access(folder, os.W_OK):
        raise argparse.ArgumentTypeError(f"folder {folder!r} is not writable")
    return text


def value_list(kind: type):
    """A comma-separated list of positive numbers (`1,8,64`), at least one, no repeats; sorted."""
    def parse(text: str) -> tuple:
        items = [item.strip() for item in text.split(",")]
        if not all(items):
            raise argparse.ArgumentTypeError(f"{text!r}: expected comma-separated values such as 1,8,64")
        values = [int_at_least(1)(item) if kind is int else positive_float()(item) for item in items]
        if len(set(values)) != len(values):
            raise argparse.ArgumentTypeError(f"{text!r}: a value is listed twice")
        return tuple(sorted(values))
    parse.__name__ = "list of integers >= 1" if kind is int else "list of positive numbers"
    return parse


def bound(text: str) -> Bound:
    """`METRIC=+N%` or `METRIC=-N%` (`loadgen compare --fail-on`)."""
    try:
        return Bound.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def rate_stages(text: str) -> tuple[tuple[float, float], ...]:
    """`RATE:SECONDS,...`, e.g. `10:30,50:60,20:30`: each rate (req/s) and duration > 0 and finite."""
    stages = []
    for item in text.split(","):
        rate, sep, secs = item.partition(":")
        if not sep:
            raise argparse.ArgumentTypeError(f"{item!r} is not RATE:SECONDS (e.g. 10:30,50:60)")
        stages.append((positive_float()(rate.strip()), positive_float()(secs.strip())))
    return tuple(stages)
