"""H3 non-incremental streaming: tokenizer-manager cost per request, copy (legacy) vs reference."""

from benchmarks.common import FORMS, Bench, history_safe
from benchmarks.workloads import OneRequestStream, form_args

NUM_TOKENS = [1_000, 4_000, 16_000]
STEPS_PER_WAKEUP = 16


def h3_stream(form: str, num_tokens: int) -> OneRequestStream:
    """The H3 workload: one request's outputs, its consumer waking once per 16 engine steps."""
    return OneRequestStream(form_args("H3", form), "tokenizer-manager", num_tokens, STEPS_PER_WAKEUP)


class TimeStreamOutputs(Bench):
    """Every output of one request of ``num_tokens`` tokens, queued and taken by its consumer."""

    params = (list(FORMS), NUM_TOKENS)
    param_names = ["form", "num_tokens"]

    def setup(self, form, num_tokens):
        with history_safe():
            self.workload = h3_stream(form, num_tokens)

    def time_request(self, form, num_tokens):
        self.workload.run()
