"""What a saved run ran, as the report shows it: the run's `workload` block, or for a file from
before it (and a peer's file) the same facts read from `config`, `dataset`, `environment` and the
summary. Each row is (name, text); a fact no field holds reads "-"."""

from __future__ import annotations

import math

from loadgen.report import peers

#: The rows of the report's workload table, in order.
ROWS = ("command", "dataset", "length convention", "token events", "input tokens (mean / min / max)",
        "output tokens (mean / min / max)", "load", "prompts / duration", "warm-up", "stamps", "machine")
NOT_RECORDED = "not recorded (file from before the workload block)"


def _dict(value) -> dict:
    return value if isinstance(value, dict) else {}


def number(value) -> str:
    """An integer as an integer (a whole float too), a boolean as true/false, else 4 significant digits."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int) or (isinstance(value, float) and math.isfinite(value) and value.is_integer()):
        return f"{int(value):d}"
    if isinstance(value, float):
        return f"{value:.4g}" if math.isfinite(value) else str(value)
    return "-" if value is None else str(value)


def _lengths(stats) -> str | None:
    stats = _dict(stats)
    if stats.get("mean") is None:
        return None
    return f"{number(round(stats['mean'], 1))} / {number(stats.get('min'))} / {number(stats.get('max'))}"


def _mean_of_total(run: dict, key: str) -> str:
    total, done = run.get(key), run.get("completed")
    if not isinstance(total, int | float) or not isinstance(done, int | float) or not done:
        return "-"
    return f"{number(round(total / done, 1))} / - / - (total {number(total)} over {number(done)} requests)"


def _rate(value) -> float | None:
    if isinstance(value, str) and value.strip().lower() in ("inf", "infinity"):
        return math.inf
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _load(mode, concurrency, rate) -> str:
    rate = _rate(rate)
    sends = "all at once" if rate is None or math.isinf(rate) else f"{number(rate)} req/s"
    cap = "no cap on requests in flight" if concurrency is None else f"at most {number(concurrency)} in flight"
    head = mode or ("rate" if rate is not None and not math.isinf(rate) else "concurrency")
    return f"{head}: sends {sends}, {cap}"


def _machine(machine: dict) -> str:
    if not machine:
        return "-"
    cores = f"{number(machine.get('cpu_count'))} cores ({number(machine.get('usable_cores'))} usable)"
    load = machine.get("load_avg_1m")
    return ", ".join([cores, str(machine.get("platform") or "-")]
                     + ([f"load average {number(load)} (1 min)"] if load is not None else []))


def _dataset(name, dataset: dict, cfg: dict, num_turns) -> str:
    """The dataset's name with what shapes it: multi-turn sessions, a trace's timestamps, random lengths asked."""
    name = str(name or "-")
    if name == "multi-turn":
        turns = dataset.get("multi_turn_num_turns") or num_turns
        return (f"multi-turn: {number(dataset.get('num_prompts'))} sessions of {number(turns)} turns, user turns of "
                f"{number(dataset.get('multi_turn_user_len'))} tokens, think time "
                f"{number(dataset.get('multi_turn_think_time_s'))} s; each turn carries the conversation so far")
    if cfg.get("replay_trace") or dataset.get("trace_timestamps"):
        return f"{name}: replays the trace's timestamps (speed-up {number(cfg.get('trace_speedup'))}x)"
    if name.startswith("random") and dataset.get("random_input_len") is not None:
        return (f"{name}: asked {number(dataset['random_input_len'])} in, {number(dataset.get('random_output_len'))} "
                f"out, range ratio {number(dataset.get('random_range_ratio'))}")
    return name


def rows(run: dict) -> list[tuple[str, str]]:
    """The workload table's rows (ROWS) of one run."""
    w, cfg, ds = _dict(run.get("workload")), _dict(run.get("config")), _dict(run.get("dataset"))
    env, health = _dict(run.get("environment")), _dict(_dict(run.get("summary")).get("client_health"))
    tool = _dict(run.get("provenance")).get("tool")
    absent = f"not in {peers.TOOLS[tool].name}'s file" if tool in peers.TOOLS else "-" if w else NOT_RECORDED
    name = w.get("dataset") or ds.get("name") or run.get("dataset_name")
    prompts = w.get("num_prompts", cfg.get("num_prompts", run.get("num_prompts")))
    duration = w.get("duration_s", cfg.get("duration_s"))
    values = {
        "command": w.get("command") or absent,
        "dataset": _dataset(name, ds, cfg, len(run.get("per_turn") or []) or None),
        "length convention": w.get("convention") or ds.get("length_convention") or ds.get("convention") or "-",
        "token events": w.get("token_event_rule") or run.get("token_event_rule") or cfg.get("token_event_rule") or "-",
        "input tokens (mean / min / max)": _lengths(w.get("input_tokens")) or _mean_of_total(run, "total_input_tokens"),
        "output tokens (mean / min / max)": _lengths(w.get("output_tokens"))
        or _mean_of_total(run, "total_output_tokens"),
        "load": _load(w.get("mode"), w["concurrency"] if "concurrency" in w else cfg.get("concurrency"),
                      w["request_rate"] if "request_rate" in w else cfg.get("request_rate", run.get("request_rate"))),
        "prompts / duration": _prompts(name, prompts, run) + ("" if duration is None else f", {number(duration)} s"),
        "warm-up": _warmup(w.get("warmup", cfg.get("warmup"))),
        "stamps": w.get("stamps") or cfg.get("stamps") or health.get("stamp_source") or "-",
        "machine": _machine(_dict(w.get("machine")) or env),
    }
    return [(key, str(values[key])) for key in ROWS]


def _prompts(name, prompts, run: dict) -> str:
    """The prompts asked for; a multi-turn run's are sessions, each sending one request per turn."""
    if prompts is None:
        return "-"
    if name != "multi-turn":
        return f"{number(prompts)} prompts"
    sent = [run.get(k) for k in ("completed", "failed")]
    total = sum(sent) if all(isinstance(v, int) for v in sent) else None
    return f"{number(prompts)} sessions ({number(total)} requests)"


def _warmup(num) -> str:
    if not isinstance(num, int) or isinstance(num, bool):
        return "-"
    return "none" if num == 0 else f"{num} requests before the measured window (not in the client's figures or plots)"
