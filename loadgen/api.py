"""loadgen as a library: the same steps the `loadgen` command takes, as functions.

A run: `plan_run(options, argv)` resolves its configuration from a dict or a config file (YAML or
JSON, keys are the long flag names: ``{"base-url": ..., "num-prompts": 100}``) and flags (which
override the file), `run(plan)` runs it and returns the RunResult, `result_json(plan, result)`
gives the results JSON that `--output` writes. A sweep: `plan_sweep` and `sweep`, which returns the
sweep JSON. Bad options raise UsageError (the CLI prints it as a usage error, exit 2); a run that
cannot start raises SetupError.

Every results JSON holds its resolved flags under ``flags`` (without the output paths), so a saved
run is its own config file: ``plan_run("RUN.json")`` or ``loadgen --config RUN.json`` replays it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from loadgen.flags import (
    SWEEP_UNSUPPORTED,
    available_memory_bytes,
    build_parser,
    build_sweep_parser,
    config_from_args,
    default_max_response_bytes,
    ray_config,
)
from loadgen.measure.workload import redact_flags
from loadgen.plan.config import DatasetConfig, RayConfig, RunConfig
from loadgen.report.records_csv import write_csv
from loadgen.report.results import result_dict, save_result, write_json, write_records
from loadgen.run.pool import SetupError
from loadgen.run.runner import RunResult, wait_ready
from loadgen.run.runner import run as run_load
from loadgen.sweep.driver import SweepSpec, run_sweep

__all__ = ["RunPlan", "SetupError", "SweepPlan", "UsageError", "load_options", "plan_run", "plan_sweep",
           "result_json", "run", "save", "sweep"]

#: issue 32: repeatable flags that are usually given once.
ONE_OR_MORE_FLAGS = ("base-url", "model")
#: Repeatable flags that a config file or the command line gives whole: a later layer replaces them.
REPLACED_FLAGS = ("base-url", "model", "server-metrics-url")
#: Flags that say where results go, not what runs: left out of a result's `flags`, so replaying a
#: saved run never writes over the file it was read from.
OUTPUT_FLAGS = ("output", "records", "csv", "save-result", "result-dir", "result-filename", "append-result")

Options = Mapping[str, object] | str | os.PathLike | None


class UsageError(ValueError):
    """A flag or config-file key that is wrong, alone or in combination; `parser` is the one that
    refused it (the CLI prints its usage)."""

    def __init__(self, message: str, parser: argparse.ArgumentParser) -> None:
        super().__init__(message)
        self.parser = parser


@dataclass(frozen=True)
class RunPlan:
    """A run's resolved configuration: the frozen configs it runs with, the flags it came from
    (`flags`: long name -> value, what a config file holds) and every parsed flag (`args`)."""

    config: RunConfig
    dataset: DatasetConfig
    ray: RayConfig | None
    flags: dict
    args: argparse.Namespace


@dataclass(frozen=True)
class SweepPlan:
    """A sweep's resolved configuration: the sweep, the first point's run configs and the flags."""

    spec: SweepSpec
    config: RunConfig
    dataset: DatasetConfig
    flags: dict
    args: argparse.Namespace


def load_options(path: str | os.PathLike) -> dict:
    """A config file's options (YAML or JSON, keys the long flag names); a results JSON (a run's
    or a sweep's) gives the flags it recorded. ValueError when the file cannot be read as one."""
    import yaml  # NOTE: YAML is a superset of JSON: one loader reads both

    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ValueError(f"cannot read config file {os.fspath(path)}: {_first_line(exc)}") from None
    if isinstance(data, dict) and isinstance(data.get("flags"), dict):
        data = data["flags"]
    if not isinstance(data, dict) or not all(isinstance(k, str) for k in data):
        raise ValueError(f"config file {os.fspath(path)}: expected a mapping of flag names to values")
    return data


def plan_run(options: Options = None, argv: Sequence[str] = ()) -> RunPlan:
    """A run's configuration from `options` (a dict or a config file's path) and `argv` (flags as
    on the command line; a `--config FILE` there overrides `options`, and the other flags override
    both). UsageError on a bad flag or combination."""
    parser = _raising(build_parser())
    merged = _merged_argv(options, argv, parser)
    args = parser.parse_args(merged)
    try:
        cfg, dcfg = config_from_args(args)
    except ValueError as exc:
        parser.error(str(exc))
    return RunPlan(cfg, dcfg, ray_config(args, parser), _given(build_parser(), merged), args)


def run(plan: RunPlan, progress: Callable | None = None) -> RunResult:
    """Run the plan (after `--ready-check-timeout-sec`'s wait, if set); `progress(totals,
    elapsed_s, scraper)` is called a few times a second if given. SetupError if it cannot start."""
    if plan.args.ready_check_timeout_sec:
        wait_ready(plan.config, plan.args.ready_check_timeout_sec)
    return run_load(plan.config, plan.dataset, progress, plan.ray)


def result_json(plan: RunPlan, result: RunResult, command: str | None = None) -> dict:
    """The results JSON (`--output`'s): `command` is the command line that ran it, if any."""
    data = result_dict(result, {**vars(plan.dataset), **result.dataset_info},
                       detailed=plan.args.save_detailed, metadata=dict(plan.args.metadata),
                       label=plan.args.label, command=command)
    data["flags"] = _recorded(plan.flags)
    # issue 32: where this run's per-request records went (`compare` reads them for its intervals)
    data["records_file"] = plan.args.records
    return data


def save(plan: RunPlan, result: RunResult, data: dict) -> dict[str, str]:
    """Write what the output flags ask for (`--output`, `--save-result`, `--records`, `--csv`);
    the paths written, by flag."""
    args, paths = plan.args, {}
    if args.output:
        write_json(args.output, data)
        paths["output"] = args.output
    if args.save_result or args.result_dir or args.result_filename:
        paths["save-result"] = save_result(data, args.result_dir, args.result_filename, args.append_result)
    if args.records:
        write_records(args.records, result)
        paths["records"] = args.records
    if args.csv:
        write_csv(args.csv, result)
        paths["csv"] = args.csv
    return paths


def plan_sweep(options: Options = None, argv: Sequence[str] = ()) -> SweepPlan:
    """A sweep's configuration from `options` and `argv` (sweep flags and run flags, as after
    `loadgen sweep`). UsageError on a bad flag or combination."""
    sp = _raising(build_sweep_parser())
    parser = _raising(build_parser())
    parser.prog = "loadgen sweep"
    merged = _merged_argv(options, argv, sp, parser)
    sargs, rest = sp.parse_known_args(merged)
    if (sargs.concurrency is None) == (sargs.request_rate is None):
        sp.error("give one of --concurrency LIST or --request-rate LIST")
    if len(sargs.slo_percentile) != 1:
        sp.error("--slo-percentile takes one percentile")
    args = parser.parse_args(rest)
    if given := [f"--{k.replace('_', '-')}" for k in SWEEP_UNSUPPORTED if getattr(args, k)]:
        sp.error(f"{', '.join(given)}: not available in a sweep (--output writes every run's results)")
    variable = "concurrency" if sargs.concurrency is not None else "request_rate"
    values = sargs.concurrency or sargs.request_rate
    setattr(args, variable, values[0])
    if variable == "concurrency" and args.max_response_bytes is None:
        args.max_response_bytes = default_max_response_bytes(max(values), available_memory_bytes())
    per_level = sargs.prompts_per_level
    if per_level is not None and args.num_prompts is None and args.duration is None:
        args.num_prompts = 1  # NOTE: then each point sends ceil(K x value) requests
    try:
        cfg, dcfg = config_from_args(args)
        cfg = dataclasses.replace(cfg, percentiles=tuple(sorted({*cfg.percentiles, 50.0, 99.0,
                                                                 *sargs.slo_percentile})))
        spec = SweepSpec(variable, values, sargs.repeats, cfg.slo, sargs.slo_percentile[0],
                         sargs.search_steps, sargs.rate_tolerance, not sargs.no_early_stop,
                         per_level, args.workers == "auto")
    except ValueError as exc:
        sp.error(str(exc))
    flags = {**_given(build_sweep_parser(), merged), **_given(build_parser(), rest)}
    return SweepPlan(spec, cfg, dcfg, flags, args)


def sweep(plan: SweepPlan, log: Callable[[str], None] | None = None) -> dict:
    """Run the sweep; the sweep JSON (`--output`'s), with the resolved flags under `flags`. `log`
    takes each progress line (default: printed to stderr). SetupError if the first run cannot start."""
    if plan.args.ready_check_timeout_sec:
        wait_ready(plan.config, plan.args.ready_check_timeout_sec)
    data = run_sweep(plan.spec, plan.config, plan.dataset, label=plan.args.label, log=log)
    data["flags"] = _recorded(plan.flags)
    return data


def _merged_argv(options: Options, argv: Sequence[str], *parsers: argparse.ArgumentParser) -> list[str]:
    """`options`, then `--config FILE`'s options, then the other flags of `argv`, as one argv (the
    parsers keep the last value given, so each layer overrides the one before)."""
    pre = _raising(argparse.ArgumentParser(prog=parsers[0].prog, add_help=False, allow_abbrev=False))
    pre.add_argument("--config")
    given, rest = pre.parse_known_args(list(argv))
    layers = [_options(options, parsers[0])]
    if given.config is not None:
        layers.append(_options(given.config, parsers[0]))
    argvs = [*(_options_argv(layer, *parsers) for layer in layers), list(rest)]
    # NOTE: a repeatable flag of a later layer replaces the earlier layers' values, not adds to them
    return [arg for i, layer_argv in enumerate(argvs)
            for arg in _without(layer_argv, {f for later in argvs[i + 1:] for f in REPLACED_FLAGS if _gives(later, f)})]


def _gives(argv: Sequence[str], key: str) -> bool:
    return any(arg == "--" + key or arg.startswith(f"--{key}=") for arg in argv)


def _without(argv: list[str], keys: set[str]) -> list[str]:
    """`argv` less the flags `keys` (`--key value` or `--key=value`)."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in {"--" + k for k in keys}:
            skip = True
        elif not any(arg.startswith(f"--{k}=") for k in keys):
            out.append(arg)
    return out


def _options(options: Options, parser: argparse.ArgumentParser) -> Mapping[str, object]:
    if options is None:
        return {}
    if isinstance(options, Mapping):
        return options
    try:
        return load_options(options)
    except ValueError as exc:
        parser.error(str(exc))


def _option_action(key: str, parsers: Sequence[argparse.ArgumentParser]) -> argparse.Action | None:
    for parser in parsers:
        # NOTE: argparse's table of option strings: aliases (--max-concurrency) are found too.
        if (action := parser._option_string_actions.get("--" + key)) is not None:
            return action
    return None


def _options_argv(options: Mapping[str, object], *parsers: argparse.ArgumentParser) -> list[str]:
    """`options` as command-line flags, for `parsers` (the first that knows a key takes it)."""
    argv: list[str] = []
    for key, value in options.items():
        action = _option_action(key, parsers)
        if action is None or action.dest == "help" or key == "config":
            parsers[0].error(f"config: unknown option {key!r} (keys are the long flag names, e.g. base-url)")
        flag = "--" + key
        if action.nargs == 0:
            if not isinstance(value, bool):
                parsers[0].error(f"config: {key} takes true or false, not {value!r}")
            argv += [flag] if value else []
        elif isinstance(action, argparse._AppendAction):
            argv += [part for item in _items(value) for part in (flag, _text(item, action))]
        elif action.nargs in ("+", "*"):
            argv += [flag, *(_text(item, action) for item in _items(value))]
        else:
            argv += [flag, _text(value, action)]
    return argv


def _items(value) -> list:
    return list(value) if isinstance(value, list | tuple) else [value]


def _text(value, action: argparse.Action) -> str:
    """One option value as its flag takes it: a list comma-joined (`percentiles: [50, 99]`), a
    mapping as JSON for a JSON flag, else as KEY=VALUE pairs (`slo: {ttft: 200}`)."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list | tuple):
        return ",".join(_text(v, action) for v in value)
    if isinstance(value, dict):
        if action.dest == "extra_request_body":
            return json.dumps(value)
        return ",".join(f"{k}={v}" for k, v in value.items())
    return str(value)


def _given(parser: argparse.ArgumentParser, argv: Sequence[str]) -> dict:
    """The flags `argv` gives, by long name, as written (the last of a repeated flag wins, an
    appended one lists each): `argv` parsed again with no defaults, types or choices."""
    for action in parser._actions:
        action.default, action.type, action.choices, action.required = argparse.SUPPRESS, None, None, False
    args, _ = parser.parse_known_args(argv)
    return {_long_name(action): getattr(args, action.dest) for action in parser._actions
            if action.option_strings and hasattr(args, action.dest)}


def _long_name(action: argparse.Action) -> str:
    return next(s for s in action.option_strings if s.startswith("--"))[2:]


def _recorded(flags: dict) -> dict:
    """The flags a result records: no output paths, secrets written as REDACTED; a repeatable flag
    given once (one --base-url, one --model) as its one value, as before it was repeatable."""
    flags = {k: v[0] if k in ONE_OR_MORE_FLAGS and len(v) == 1 else v for k, v in flags.items()}
    return redact_flags({k: v for k, v in flags.items() if k not in OUTPUT_FLAGS})


def _raising(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """`parser`, raising UsageError where argparse would print usage and exit."""
    def error(message: str):
        raise UsageError(message, parser)

    parser.error = error
    return parser


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
