"""Command line: `loadgen [run flags]` runs a load; `loadgen compare A.json B.json ...` compares runs.

Argparse lives only here; defaults are read from the config dataclasses.
"""

from __future__ import annotations

import argparse
import json
import math
import sys

from rich.console import Console
from rich.live import Live
from rich.text import Text

from loadgen.config import BACKENDS, DATASETS, SLO, TRANSPORTS, RunConfig, auto_workers
from loadgen.datasets import DatasetConfig
from loadgen.report import compare, print_table, result_dict, write_json, write_records
from loadgen.runner import run

_RC, _DC = RunConfig(concurrency=1, num_prompts=1), DatasetConfig()


def _slo(text: str | None) -> SLO:
    if not text:
        return SLO()
    parts = dict(kv.split("=", 1) for kv in text.split(","))
    bad = set(parts) - {"ttft", "tpot", "e2e"}
    if bad:
        raise argparse.ArgumentTypeError(f"unknown SLO keys {sorted(bad)}")
    return SLO(**{f"{k}_ms": float(v) for k, v in parts.items()})


def _headers(items: list[str]) -> dict:
    return dict(h.split(":", 1) for h in items) if items else {}


def build_parser() -> argparse.ArgumentParser:
    """The run parser (flag names follow SGLang's bench_serving where it has one)."""
    p = argparse.ArgumentParser(prog="loadgen", description="Load generator for OpenAI-compatible servers.")
    a = p.add_argument
    a("--base-url", default=_RC.base_url, help="server root, e.g. http://127.0.0.1:30000")
    a("--model", default=None, help="model name (default: the first one /v1/models lists)")
    a("--backend", choices=BACKENDS, default=_RC.backend)
    a("--no-stream", action="store_true", help="ask for whole responses instead of SSE streams")
    a("--concurrency", "--max-concurrency", type=int, default=None, help="requests in flight at most")
    a("--request-rate", type=float, default=math.inf, help="open-loop arrival rate (req/s)")
    a("--burstiness", type=float, default=_RC.burstiness, help="gamma shape: 1 Poisson, inf constant")
    a("--num-prompts", type=int, default=None, help="number of measured requests")
    a("--duration", type=float, default=None, help="seconds of sending new requests")
    a("--warmup", type=int, default=0, help="requests sent first and left out of the statistics")
    a("--workers", default="auto", help="worker processes: auto or a number")
    a("--timeout", type=float, default=_RC.timeout_s, help="seconds per request, end to end")
    a("--transport", choices=TRANSPORTS, default=_RC.transport, help="httpx transport behind the client")
    a("--ignore-eos", action="store_true", help="send ignore_eos: true")
    a("--min-tokens", action="store_true", help="send min_tokens equal to the output length")
    a("--no-usage", action="store_true", help="do not ask for stream_options.include_usage")
    a("--extra-request-body", default=None, help="JSON object merged into every request body")
    a("--header", action="append", default=[], help="'Name: value', repeatable")
    a("--dataset", "--dataset-name", dest="dataset", choices=DATASETS, default=_DC.name)
    a("--dataset-path", default=None, help="ShareGPT-format JSON file")
    a("--random-input-len", type=int, default=_DC.random_input_len)
    a("--random-output-len", type=int, default=_DC.random_output_len)
    a("--random-range-ratio", type=float, default=_DC.random_range_ratio)
    a("--sharegpt-output-len", type=int, default=None)
    a("--shared-prefix-groups", type=int, default=_DC.shared_prefix_groups)
    a("--shared-prefix-len", type=int, default=_DC.shared_prefix_len)
    a("--tokenizer", default=None, help="local tokenizer.json for exact token lengths")
    a("--seed", type=int, default=_RC.seed)
    a("--percentiles", default=",".join(f"{x:g}" for x in _RC.percentiles), help="e.g. 50,90,99")
    a("--slo", default=None, help="goodput bounds in ms: ttft=...,tpot=...,e2e=...")
    a("--output", default=None, help="results JSON path")
    a("--records", default=None, help="per-request JSONL path")
    a("--strict", action="store_true", help="exit 3 when the run was client-bound")
    a("--quiet", action="store_true", help="no live display and no table")
    return p


def config_from_args(args: argparse.Namespace) -> tuple[RunConfig, DatasetConfig]:
    """The frozen configs from parsed flags."""
    workers = auto_workers(args.concurrency) if args.workers == "auto" else int(args.workers)
    num_prompts = args.num_prompts
    if num_prompts is None and args.duration is None:
        num_prompts = 1000
    cfg = RunConfig(
        base_url=args.base_url.rstrip("/"), model=args.model, backend=args.backend,
        stream=not args.no_stream, concurrency=args.concurrency, request_rate=args.request_rate,
        burstiness=args.burstiness, num_prompts=num_prompts, duration_s=args.duration,
        warmup=args.warmup, workers=workers, timeout_s=args.timeout, ignore_eos=args.ignore_eos,
        min_tokens=args.min_tokens, include_usage=not args.no_usage,
        extra_body=json.loads(args.extra_request_body) if args.extra_request_body else {},
        headers=_headers(args.header), transport=args.transport, seed=args.seed,
        percentiles=tuple(float(x) for x in args.percentiles.split(",")), slo=_slo(args.slo),
        strict=args.strict,
    )
    dcfg = DatasetConfig(
        name=args.dataset, num_prompts=num_prompts or 1, random_input_len=args.random_input_len,
        random_output_len=args.random_output_len, random_range_ratio=args.random_range_ratio,
        dataset_path=args.dataset_path, sharegpt_output_len=args.sharegpt_output_len,
        shared_prefix_groups=args.shared_prefix_groups, shared_prefix_len=args.shared_prefix_len,
        tokenizer_path=args.tokenizer, seed=args.seed,
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


def _run(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    cfg, dcfg = config_from_args(args)
    console = Console(stderr=True)
    if args.quiet:
        result = run(cfg, dcfg)
    else:
        with Live(Text("starting..."), console=console, refresh_per_second=4) as live:
            result = run(cfg, dcfg, _progress_view(cfg, live))
        print_table(result)
    dataset = {k: v for k, v in vars(dcfg).items()}
    if args.output:
        write_json(args.output, result_dict(result, dataset))
    if args.records:
        write_records(args.records, result)
    if result.interrupted:
        return 130
    return 3 if cfg.strict and result.summary["client_bound"] else 0


def main(argv: list[str] | None = None) -> int:
    """Console entry point (`loadgen`)."""
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "compare":
        if len(argv) < 2:
            print("usage: loadgen compare A.json B.json ...", file=sys.stderr)
            return 2
        compare(argv[1:])
        return 0
    return _run(argv)


if __name__ == "__main__":
    sys.exit(main())
