"""H5 prefill delayer: the real scheduler and sim engine on a virtual clock (deterministic)."""

from benchmarks.common import history_safe
from benchmarks.workloads import DELAYER_MODES, PrefillDelayerRun

RANGE_RATIOS = [1.0, 0.8]
CONCURRENCY = [16, 64, 128]


class TrackPrefillDelayer:
    """Output tokens per virtual second and prefill steps, ISL 1000, OSL up to 256, 4x conc requests."""

    params = (list(DELAYER_MODES), RANGE_RATIOS, CONCURRENCY)
    param_names = ["delayer", "range_ratio", "concurrency"]
    timeout = 300

    def setup(self, delayer, range_ratio, concurrency):
        with history_safe():
            self.workload = PrefillDelayerRun(delayer, range_ratio, concurrency)

    def track_output_throughput(self, delayer, range_ratio, concurrency):
        return self.workload.run()["output_throughput"]

    track_output_throughput.unit = "tok/s"

    def track_prefill_steps(self, delayer, range_ratio, concurrency):
        return self.workload.run()["num_prefill_steps"]

    track_prefill_steps.unit = "steps"
