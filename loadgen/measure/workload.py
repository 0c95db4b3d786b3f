"""The `workload` block of the results JSON: what ran, as a replayable command, with the lengths
actually sent and received and the machine it ran on (see loadgen/README.md, "Output")."""

from __future__ import annotations

import math
import shlex

from loadgen.measure.machine import machine
from loadgen.measure.metrics import input_tokens, output_tokens

#: Flags whose value is a secret, written as REDACTED in the command.
SECRET_FLAGS = ("--api-key",)


def command_line(argv: list[str]) -> str:
    """The `loadgen` command that `argv` (the arguments after the program name) replays, with
    secrets (an API key, an Authorization header's value) written as REDACTED."""
    out, secret_next = ["loadgen"], False
    for arg in argv:
        flag, eq, value = arg.partition("=")
        if secret_next:
            arg = _redacted(out[-1], arg)
        elif eq and flag in (*SECRET_FLAGS, "--header"):
            arg = f"{flag}={_redacted(flag, value)}"
        secret_next = arg in (*SECRET_FLAGS, "--header")
        out.append(arg)
    return shlex.join(out)


def redact_flags(flags: dict) -> dict:
    """`flags` (long name -> value, as a config file holds them) with secrets written as REDACTED,
    as `command_line` writes them."""
    out = dict(flags)
    for key, value in flags.items():
        flag = "--" + key
        if flag in SECRET_FLAGS:
            out[key] = "REDACTED"
        elif flag == "--header":
            out[key] = [_redacted(flag, v) for v in value]
    return out


def _redacted(flag: str, value: str) -> str:
    if flag in SECRET_FLAGS:
        return "REDACTED"
    name, colon, _ = value.partition(":")
    return f"{name}: REDACTED" if colon and name.strip().lower() in ("authorization", "x-api-key") else value


def length_stats(values: list[int]) -> dict | None:
    """`{mean, min, max}` of `values`; None when there are none."""
    if not values:
        return None
    return {"mean": sum(values) / len(values), "min": min(values), "max": max(values)}


def workload(result, dataset: dict, command: str | None) -> dict:
    """The block for `result` (a RunResult): `command` is None where the run did not come from
    the command line. Lengths are over the requests that succeeded: input as the server's usage
    counted it (the dataset's length without usage), output as `output_tokens` counts it."""
    cfg, ok = result.cfg, [r for r in result.records if r.ok]
    return {
        "command": command, "dataset": dataset.get("name"), "convention": dataset.get("convention"),
        "token_event_rule": cfg.token_event_rule,
        "input_tokens": length_stats([input_tokens(r) for r in ok]),
        "output_tokens": length_stats([output_tokens(r) for r in ok]),
        "mode": "rate" if cfg.is_rate_mode else "concurrency", "concurrency": cfg.concurrency,
        "request_rate": None if math.isinf(cfg.request_rate) else cfg.request_rate,
        "num_prompts": len(result.records), "duration_s": cfg.duration_s, "warmup": cfg.warmup,
        "stamps": result.summary["client_health"].get("stamp_source", "loop"),
        "machine": machine(result.load_avg_1m),
    }
