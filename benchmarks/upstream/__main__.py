"""`python -m benchmarks.upstream [--hot-path H2] [--releases A,B,...] [--json FILE] [--asv]`."""

from __future__ import annotations

import argparse
import json
import sys

from benchmarks.upstream import harness, releases
from benchmarks.upstream.cases import HOT_PATHS


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.upstream", description=(
        "Measure upstream sglang's own hot-path functions on PyPI releases (before and after "
        "each change), building what is needed into a cached, git-ignored place."))
    parser.add_argument("--hot-path", action="append", choices=HOT_PATHS,
                        help="a hot path to measure (repeatable; default: every one with a case)")
    parser.add_argument("--releases", type=lambda s: [v for v in s.split(",") if v],
                        help="comma-separated releases, oldest first (default: each hot path's pair)")
    parser.add_argument("--json", metavar="FILE", help="also write the result as JSON")
    parser.add_argument("--asv", action="store_true",
                        help="run the same cases through asv over a git repository of the releases")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    hot_paths = args.hot_path or list(HOT_PATHS)
    try:
        if args.asv:
            from benchmarks.upstream import asv_repo

            return asv_repo.run(hot_paths, args.releases)
        result = harness.compare(hot_paths, args.releases)
    except releases.ReleaseError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(harness.format_table(result))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=1)
    return 1 if result["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
