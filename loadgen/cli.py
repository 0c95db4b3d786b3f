"""Command line: `loadgen [run flags]` runs a load; `loadgen compare A.json B.json ...` compares runs.

Argparse lives only here; defaults are read from the config dataclasses.
"""

from __future__ import annotations

import argparse
import math
import sys

from rich.console import Console
from rich.live import Live
from rich.text import Text

from loadgen import argtypes as at
from loadgen.config import BACKENDS, DATASETS, SLO, TRANSPORTS, RunConfig, auto_workers
from loadgen.datasets import DatasetConfig
from loadgen.report import compare, print_table, result_dict, write_json, write_records
from loadgen.runner import SetupError, run

_RC, _DC = RunConfig(concurrency=1, num_prompts=1), DatasetConfig()


USAGE_EPILOG = """\
subcommands:
  loadgen compare A.json B.json ...   print saved runs (--output files) side by side, with ratios

exit codes: 0 done; 1 the run could not start (server unreachable, dataset unreadable);
2 bad flags; 3 client-bound under --strict; 4 failed requests above --max-error-rate
(default: only when every request failed); 130 interrupted (results still written)."""


def build_parser() -> argparse.ArgumentParser:
    """The run parser (flag names follow SGLang's bench_serving where it has one)."""
    p = argparse.ArgumentParser(
        prog="loadgen", usage="%(prog)s [run flags]\n       %(prog)s compare A.json B.json ...",
        description="Load generator for OpenAI-compatible servers.", epilog=USAGE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    a = p.add_argument
    pos_int, nonneg_int = at.int_at_least(1), at.int_at_least(0)
    a("--base-url", type=at.base_url, default=_RC.base_url, help="server root, e.g. http://127.0.0.1:30000")
    a("--model", default=None, help="model name (default: the first one /v1/models lists)")
    a("--backend", choices=BACKENDS, default=_RC.backend)
    a("--no-stream", action="store_true", help="ask for whole responses instead of SSE streams")
    a("--concurrency", "--max-concurrency", type=pos_int, default=None, help="requests in flight at most")
    a("--request-rate", type=at.positive_float(allow_inf=True), default=math.inf,
      help="open-loop arrival rate (req/s)")
    a("--burstiness", type=at.positive_float(allow_inf=True), default=_RC.burstiness,
      help="gamma shape: 1 Poisson, inf constant")
    a("--num-prompts", type=pos_int, default=None, help="number of measured requests")
    a("--duration", type=at.positive_float(), default=None, help="seconds of sending new requests")
    a("--warmup", type=nonneg_int, default=0, help="requests sent first and left out of the statistics")
    a("--workers", type=at.workers, default="auto", help="worker processes: auto or a number")
    a("--timeout", type=at.positive_float(), default=_RC.timeout_s, help="seconds per request, end to end")
    a("--transport", choices=TRANSPORTS, default=_RC.transport, help="httpx transport behind the client")
    a("--max-response-bytes", type=pos_int, default=_RC.max_response_bytes,
      help="cut a response past this many bytes while reading it (error too_large)")
    a("--max-error-rate", type=at.fraction, default=None,
      help="exit 4 when the failed fraction passes this (default: only when all failed)")
    a("--ignore-eos", action="store_true", help="send ignore_eos: true")
    a("--min-tokens", action="store_true", help="send min_tokens equal to the output length")
    a("--no-usage", action="store_true", help="do not ask for stream_options.include_usage")
    a("--extra-request-body", type=at.json_object, default={}, help="JSON object merged into every request body")
    a("--header", type=at.header, action="append", default=[], help="'Name: value', repeatable")
    a("--dataset", "--dataset-name", dest="dataset", choices=DATASETS, default=_DC.name)
    a("--dataset-path", type=at.existing_file, default=None, help="ShareGPT-format JSON file")
    a("--random-input-len", type=pos_int, default=_DC.random_input_len)
    a("--random-output-len", type=pos_int, default=_DC.random_output_len)
    a("--random-range-ratio", type=at.fraction, default=_DC.random_range_ratio)
    a("--sharegpt-output-len", type=pos_int, default=None)
    a("--shared-prefix-groups", type=pos_int, default=_DC.shared_prefix_groups)
    a("--shared-prefix-len", type=pos_int, default=_DC.shared_prefix_len)
    a("--tokenizer", type=at.existing_file, default=None, help="local tokenizer.json for exact token lengths")
    a("--no-server-tokenize", action="store_true",
      help="without --tokenizer, estimate prompt lengths instead of calibrating them via /tokenize")
    a("--seed", type=nonneg_int, default=_RC.seed)
    a("--percentiles", type=at.percentiles, default=_RC.percentiles, help="e.g. 50,90,99")
    a("--slo", type=at.slo, default=SLO(), help="goodput bounds in ms: ttft=...,tpot=...,e2e=...")
    a("--output", type=at.writable_path, default=None, help="results JSON path")
    a("--records", type=at.writable_path, default=None, help="per-request JSONL path")
    a("--strict", action="store_true", help="exit 3 when the run was client-bound")
    a("--quiet", action="store_true", help="no live display and no table")
    return p


def config_from_args(args: argparse.Namespace) -> tuple[RunConfig, DatasetConfig]:
    """The frozen configs from parsed flags (ValueError on an incompatible combination)."""
    workers = auto_workers(args.concurrency) if args.workers == "auto" else args.workers
    num_prompts = args.num_prompts
    if num_prompts is None and args.duration is None:
        num_prompts = 1000
    if args.transport == "lean" and args.base_url.startswith("https://"):
        raise ValueError("--transport lean serves http:// only; use --transport httpx for https://")
    if args.dataset == "random-ids" and args.backend != "openai-completions":
        raise ValueError("--dataset random-ids sends token ids: it needs --backend openai-completions")
    cfg = RunConfig(
        base_url=args.base_url, model=args.model, backend=args.backend,
        stream=not args.no_stream, concurrency=args.concurrency, request_rate=args.request_rate,
        burstiness=args.burstiness, num_prompts=num_prompts, duration_s=args.duration,
        warmup=args.warmup, workers=workers, timeout_s=args.timeout, ignore_eos=args.ignore_eos,
        min_tokens=args.min_tokens, include_usage=not args.no_usage,
        extra_body=args.extra_request_body, headers=dict(args.header), transport=args.transport,
        max_response_bytes=args.max_response_bytes, max_error_rate=args.max_error_rate,
        seed=args.seed, percentiles=args.percentiles, slo=args.slo, strict=args.strict,
    )
    dcfg = DatasetConfig(
        name=args.dataset, num_prompts=num_prompts or 1, random_input_len=args.random_input_len,
        random_output_len=args.random_output_len, random_range_ratio=args.random_range_ratio,
        dataset_path=args.dataset_path, sharegpt_output_len=args.sharegpt_output_len,
        shared_prefix_groups=args.shared_prefix_groups, shared_prefix_len=args.shared_prefix_len,
        tokenizer_path=args.tokenizer, use_server_tokenize=not args.no_server_tokenize, seed=args.seed,
    )
    return cfg, dcfg


def _progress_view(cfg: RunConfig, live: Live):
    def update(t: dict, elapsed: float) -> None:
        rate = t["chunks"] / elapsed if elapsed > 0 else 0.0
        if cfg.duration_s is not None:
            eta = max(cfg.duration_s - elapsed, 0.0)
        elif t["done"]:
            eta = (cfg.num_prompts - t["done"]) * elapsed / t["done"]
        else:
            eta = float("nan")
        live.update(Text(f"done {t['done']}  in flight {t['in_flight']}  errors {t['errors']}  "
                         f"chunks/s {rate:,.0f}  elapsed {elapsed:.1f}s  ETA {eta:.0f}s"))
    return update


def _exit_code(cfg: RunConfig, result) -> int:
    s = result.summary
    total = s["completed"] + s["failed"]
    if result.interrupted:
        return 130
    too_many = total > 0 and (s["failed"] == total if cfg.max_error_rate is None
                              else s["failed"] / total > cfg.max_error_rate)
    if too_many:
        limit = "every request failed" if cfg.max_error_rate is None else f"above --max-error-rate {cfg.max_error_rate:g}"
        print(f"loadgen: {s['failed']} of {total} requests failed ({limit})", file=sys.stderr)
        return 4
    return 3 if cfg.strict and s["client_bound"] else 0


def _run(argv: list[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        cfg, dcfg = config_from_args(args)
    except ValueError as exc:
        parser.error(str(exc))
    console = Console(stderr=True)
    try:
        if args.quiet:
            result = run(cfg, dcfg)
        else:
            with Live(Text("starting..."), console=console, refresh_per_second=4) as live:
                result = run(cfg, dcfg, _progress_view(cfg, live))
    except SetupError as exc:
        print(f"loadgen: {exc}", file=sys.stderr)
        return 1
    if not args.quiet:
        print_table(result)
    if args.output:
        write_json(args.output, result_dict(result, {**vars(dcfg), **result.dataset_info}))
    if args.records:
        write_records(args.records, result)
    return _exit_code(cfg, result)


def _compare(paths: list[str]) -> int:
    if not paths:
        print("usage: loadgen compare A.json B.json ...", file=sys.stderr)
        return 2
    try:
        compare(paths)
    except (OSError, ValueError) as exc:
        print(f"loadgen compare: cannot read {exc}", file=sys.stderr)
        return 2
    return 0


def main(argv: list[str] | None = None) -> int:
    """Console entry point (`loadgen`)."""
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "compare":
        return _compare(argv[1:])
    return _run(argv)


if __name__ == "__main__":
    sys.exit(main())
