"""H5 in the DP-attention regime: ``python -m benchmarks.h5_regime``.

The real scheduler ranks, prefill delayer and sim engines (``--dp-size`` lockstep ranks,
profile ``gb200-moe-dp``) on the virtual clock, closed-loop clients at each concurrency,
ISL = OSL = 1000 by default, output lengths uniform in [int(1000 * r), 1000] for range ratio r.
Prints one JSON object per line: ``range_ratio``, ``concurrency``, ``delayer`` ("off", "slot",
"queue"), ``queue_min_ratio`` (queue rows), ``output_tok_s``, ``prefill_steps``,
``p99_decode_gap_ms``, ``sim_seconds`` and ``wall_seconds``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from benchmarks.workloads.scheduler import (
    DELAYER_MODES,
    DP_PROFILE,
    DP_SIZE,
    QUEUE_MIN_RATIO,
    PrefillDelayerRun,
)


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",")]


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",")]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.h5_regime", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--range-ratios", type=_floats, default=[1.0, 0.8])
    parser.add_argument("--concurrency", type=_ints, default=[16, 64, 128])
    parser.add_argument("--delayers", type=lambda t: t.split(","), default=list(DELAYER_MODES))
    parser.add_argument("--queue-min-ratios", type=_floats, default=[QUEUE_MIN_RATIO],
                        help="one 'queue' row per ratio (upstream swept 0.1,0.15,0.2,0.3,0.4)")
    parser.add_argument("--prompts-per-client", type=int, default=4,
                        help="requests sent = this x concurrency")
    parser.add_argument("--input-len", type=int, default=1000)
    parser.add_argument("--output-len", type=int, default=1000)
    parser.add_argument("--dp-size", type=int, default=DP_SIZE)
    parser.add_argument("--sim-profile", default=DP_PROFILE,
                        help="e.g. h100-llama-8b with --dp-size 1: one rank, cheap prefill")
    parser.add_argument("--seed", type=int, default=1234)
    return parser


def _runs(ns: argparse.Namespace):
    for range_ratio in ns.range_ratios:
        for concurrency in ns.concurrency:
            for delayer in ns.delayers:
                ratios = ns.queue_min_ratios if delayer == "queue" else [None]
                for ratio in ratios:
                    yield range_ratio, concurrency, delayer, ratio


def main(argv: list[str] | None = None) -> int:
    ns = build_parser().parse_args(argv)
    unknown = set(ns.delayers) - set(DELAYER_MODES)
    if unknown:
        raise SystemExit(f"unknown delayer mode(s) {sorted(unknown)}; choose from {DELAYER_MODES}")
    for range_ratio, concurrency, delayer, ratio in _runs(ns):
        workload = PrefillDelayerRun(
            delayer, range_ratio, concurrency, input_len=ns.input_len, output_len=ns.output_len,
            num_requests=ns.prompts_per_client * concurrency,
            queue_min_ratio=ratio or QUEUE_MIN_RATIO, dp_size=ns.dp_size, seed=ns.seed,
            sim_profile=ns.sim_profile)
        start = time.perf_counter()
        result = workload.run()
        row = {"range_ratio": range_ratio, "concurrency": concurrency, "delayer": delayer}
        if ratio is not None:
            row["queue_min_ratio"] = ratio
        row |= {k: round(v, 1) for k, v in result.items()}
        row["wall_seconds"] = round(time.perf_counter() - start, 2)
        print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
