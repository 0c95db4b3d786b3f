"""The main job: a streaming-chat storm against the reference server, all-legacy vs all-optimized.

Starts the server in each form on 127.0.0.1 (sim engine, embedded tokenizer: no download, no
GPU), drives it with ``loadgen``, stops it, and prints both runs side by side with ratios.

    python scripts/storm.py --concurrency 2048
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from reference_impl.subprocess_server import ServerProcess

FORMS = {"all-legacy": ["--all-legacy"], "all-optimized": []}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", type=int, default=2048)
    parser.add_argument("--num-prompts", type=int, default=None, help="default: the concurrency")
    parser.add_argument("--input-len", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--workers", default="2")
    parser.add_argument("--out-dir", default="results/storm")
    parser.add_argument("--server-flag", action="append", default=[],
                        help="extra flag for both servers, e.g. --server-flag=--sim-profile=zero")
    return parser.parse_args(argv)


def run_form(name: str, flags: list[str], args: argparse.Namespace, out_dir: Path) -> Path:
    """One server start, one loadgen run; the loadgen JSON path."""
    result = out_dir / f"{name}.json"
    with ServerProcess(*flags, *args.server_flag, log_path=str(out_dir / f"{name}.server.log")) as srv:
        cmd = [sys.executable, "-m", "loadgen", "--base-url", srv.url,
               "--concurrency", str(args.concurrency),
               "--num-prompts", str(args.num_prompts or args.concurrency),
               "--random-input-len", str(args.input_len), "--random-output-len", str(args.output_len),
               "--random-range-ratio", "1.0", "--ignore-eos", "--workers", args.workers,
               "--output", str(result), "--quiet"]
        print(f"== {name}: {' '.join(cmd[3:])}", flush=True)
        subprocess.run(cmd, check=True)
    return result


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    results = [run_form(name, flags, args, out_dir) for name, flags in FORMS.items()]
    return subprocess.run([sys.executable, "-m", "loadgen", "compare", *map(str, results)]).returncode


if __name__ == "__main__":
    sys.exit(main())
