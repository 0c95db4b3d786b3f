"""pytest-benchmark harness of the asv workloads.

In the normal test run every benchmark body executes once with timing disabled (so a broken
benchmark fails the tests); ``--benchmark-enable`` (or ``--benchmark-only``) turns timing on.
"""

from __future__ import annotations

import itertools

import pytest


def _timing_enabled(config: pytest.Config) -> bool:
    return bool(config.getoption("benchmark_enable") or config.getoption("benchmark_only"))


@pytest.fixture
def bench(benchmark, request):
    """pytest-benchmark's fixture, timing only when asked for on the command line."""
    if not _timing_enabled(request.config):
        benchmark.disabled = True
    return benchmark


def asv_params(cls) -> pytest.MarkDecorator:
    """Parametrize a test over every parameter combination of an asv class."""
    names = cls.param_names
    params = cls.params if len(names) > 1 else (cls.params,)
    return pytest.mark.parametrize(",".join(names), list(itertools.product(*params)))
