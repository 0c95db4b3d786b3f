"""H4 token storage: request lifecycle stages, list[int] (legacy) vs array('q') (optimized)."""

from benchmarks.common import FORMS, Bench, history_safe
from benchmarks.workloads import H4_STAGES, TokenLifecycle, form_args

PROMPT_LENS = [1_000, 10_000, 100_000]


class TimeTokenStorage(Bench):
    """2 requests of ``prompt_len`` prompt tokens and 1K decode steps, one stage per call."""

    params = (list(FORMS), PROMPT_LENS, list(H4_STAGES))
    param_names = ["form", "prompt_len", "stage"]

    def setup(self, form, prompt_len, stage):
        with history_safe():
            self.workload = TokenLifecycle(form_args("H4", form), prompt_len, stage)

    def time_stage(self, form, prompt_len, stage):
        self.workload.run()
