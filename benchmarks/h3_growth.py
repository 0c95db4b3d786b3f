"""H3+H6 in the default (non-incremental) streaming mode: cost per request vs output length.

One streamed chat request through the real tokenizer manager and ``ServingChat`` (a wake-up per
engine step, every SSE chunk encoded) at 2K, 8K and 32K output tokens, in three forms:

- ``legacy``: ``--stream-output copy --stream-delta concat`` (O(n) per step: quadratic);
- ``upstream``: ``--stream-output reference-full`` (sglang#22567 on #22548 exactly: the whole
  text is still built once per wake-up, an O(n) string per step);
- ``optimized``: the default, ``--stream-output reference --stream-delta offset`` (past
  upstream: the consumer gets only the new text, so a request is O(n)).

    python -m benchmarks.h3_growth            # one JSON object per line, then the exponents
"""

from __future__ import annotations

import argparse
import json
import sys

from benchmarks.common import best_time, fit_exponent, history_safe
from benchmarks.workloads import OneRequestStream

SIZES = [2_000, 8_000, 32_000]
FORMS = {
    "legacy": {"stream_output": "copy", "stream_delta": "concat"},
    "upstream": {"stream_output": "reference-full", "stream_delta": "offset"},
    "optimized": {},
}


def h3h6_chat(form: str, num_tokens: int) -> OneRequestStream:
    """One default-mode chat request of ``num_tokens`` tokens in ``form`` (a key of ``FORMS``)."""
    with history_safe():
        from reference_impl.config import ServerArgs

        return OneRequestStream(ServerArgs(**FORMS[form]), "chat", num_tokens, steps_per_wakeup=1)


def measure(form: str, sizes: list[int], repeat: int) -> list[float]:
    """Seconds per request at each size (best of ``repeat``)."""
    costs = []
    for size in sizes:
        workload = h3h6_chat(form, size)
        try:
            costs.append(best_time(workload.run, repeat=repeat, min_time=0.0))
        finally:
            workload.close()
    return costs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=SIZES)
    parser.add_argument("--repeat", type=int, default=3, help="best of N runs per size")
    parser.add_argument("--forms", nargs="+", choices=list(FORMS), default=list(FORMS))
    args = parser.parse_args(argv)
    for form in args.forms:
        costs = measure(form, args.sizes, args.repeat)
        for size, cost in zip(args.sizes, costs, strict=True):
            print(json.dumps({"form": form, "num_tokens": size, "seconds": round(cost, 5)}), flush=True)
        # NOTE: the fit over all sizes includes a per-chunk constant that hides the O(n^2) term at
        # small sizes; the slope between the two largest shows the growth that is left.
        print(json.dumps({"form": form, "exponent": round(fit_exponent(args.sizes, costs), 3),
                          "exponent_largest_two": round(fit_exponent(args.sizes[-2:], costs[-2:]), 3)}),
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
