"""H1 wake-ups: one engine step's batch delivered to waiting chat streams, immediate vs batched."""

from benchmarks.common import FORMS, Bench, history_safe
from benchmarks.workloads import WakeupStep, form_args

NUM_CONSUMERS = [256, 2048]
NOTIFY_SIZES = [1, 16, 64]
LEGACY_NOTIFY_SIZE = 16  # the legacy form ignores the size: measured once


def h1_step(form: str, num_consumers: int, notify_size: int) -> WakeupStep:
    """The H1 workload; incremental output mode keeps every step's cost the same."""
    args = form_args("H1", form, batch_notify_size=notify_size, incremental_streaming_output=True)
    return WakeupStep(args, num_consumers)


class TimeWakeups(Bench):
    """The output handler delivers one step and every stream turns its output into an SSE chunk."""

    params = (list(FORMS), NUM_CONSUMERS, NOTIFY_SIZES)
    param_names = ["form", "num_consumers", "batch_notify_size"]

    def setup(self, form, num_consumers, batch_notify_size):
        if form == "legacy" and batch_notify_size != LEGACY_NOTIFY_SIZE:
            raise NotImplementedError("the legacy form has no batch notify size")
        with history_safe():
            self.workload = h1_step(form, num_consumers, batch_notify_size)

    def time_step(self, form, num_consumers, batch_notify_size):
        self.workload.run()
