"""What every benchmark shares: one thread for BLAS/OpenMP/torch, history guards, growth fits.

Imported first by every ``bench_*`` module and by the workloads, so the thread settings are in
place before numpy or torch load.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Callable, Iterator, Sequence

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS",
             "VECLIB_MAXIMUM_THREADS"):
    os.environ.setdefault(_var, "1")

SEED = 1234
FORMS = ("legacy", "optimized")


def set_single_thread() -> None:
    """One intra-op and one inter-op thread for torch (the machine has two noisy cores)."""
    import torch

    torch.set_num_threads(1)
    with contextlib.suppress(RuntimeError):  # already set in this process
        torch.set_num_interop_threads(1)


@contextlib.contextmanager
def history_safe() -> Iterator[None]:
    """Turn a missing module or attribute of an older commit into asv's "n/a" (NotImplementedError)."""
    try:
        yield
    except (ImportError, AttributeError, TypeError) as exc:
        raise NotImplementedError(f"not available at this commit: {exc}") from exc


def fit_exponent(sizes: Sequence[float], costs: Sequence[float]) -> float:
    """Least-squares slope of log(cost) against log(size): ~1 linear, ~2 quadratic."""
    xs = [math.log(s) for s in sizes]
    ys = [math.log(c) for c in costs]
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    num = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True))
    den = sum((x - mean_x) ** 2 for x in xs)
    return num / den


def best_time(fn: Callable[[], object], repeat: int = 5, min_time: float = 0.05) -> float:
    """Seconds per call of ``fn``: the best of ``repeat`` rounds of at least ``min_time`` each."""
    best = math.inf
    for _ in range(repeat):
        calls, start = 0, time.perf_counter()
        while True:
            fn()
            calls += 1
            elapsed = time.perf_counter() - start
            if elapsed >= min_time:
                break
        best = min(best, elapsed / calls)
    return best


def growth_exponent(build: Callable[[int], Callable[[], object]], sizes: Sequence[int],
                    repeat: int = 5, min_time: float = 0.05) -> float:
    """Fitted exponent of the cost of ``build(size)()`` over ``sizes`` (best-of-``repeat`` times)."""
    costs = [best_time(build(size), repeat, min_time) for size in sizes]
    return fit_exponent(sizes, costs)


class Bench:
    """Timing settings shared by the ``time_`` classes.

    Many short rounds rather than a few long ones: ``asv continuous`` interleaves rounds of the
    two commits, so a burst of load from other work on this shared machine hits both.
    """

    rounds = 4
    repeat = (2, 4, 0.4)
    warmup_time = 0.05
    sample_time = 0.01
    timeout = 180
    workload = None

    def teardown(self, *params):
        close = getattr(self.workload, "close", None)
        if close is not None:
            close()
