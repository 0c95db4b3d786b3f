"""H6 stream deltas: the serving layer streaming one request, concat (legacy) vs offset (optimized).

Incremental streaming output, a wake-up per engine step: every delta goes through the tracker
and the SSE encoder (in the default cumulative mode the per-wake-up text join of H3 costs more
than either tracker; see benchmarks/README.md).
"""

from benchmarks.common import FORMS, Bench, history_safe
from benchmarks.workloads import OneRequestStream, form_args

ENDPOINTS = ["chat", "completions-echo"]
NUM_TOKENS = [1_000, 4_000, 16_000]


def h6_stream(form: str, endpoint: str, num_tokens: int) -> OneRequestStream:
    """The H6 workload: every delta of one request of ``num_tokens`` tokens."""
    return OneRequestStream(form_args("H6", form, incremental_streaming_output=True), endpoint, num_tokens)


class TimeStreamDeltas(Bench):
    """Every SSE chunk of one streamed request of ``num_tokens`` output tokens."""

    params = (list(FORMS), ENDPOINTS, NUM_TOKENS)
    param_names = ["form", "endpoint", "num_tokens"]

    def setup(self, form, endpoint, num_tokens):
        with history_safe():
            self.workload = h6_stream(form, endpoint, num_tokens)

    def time_request(self, form, endpoint, num_tokens):
        self.workload.run()
