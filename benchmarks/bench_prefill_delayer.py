"""H5 prefill delayer in the DP-attention regime: real scheduler ranks, delayer and sim engines
on a virtual clock (deterministic). The same workload as ``python -m benchmarks.h5_regime``."""

from benchmarks.common import history_safe
from benchmarks.workloads import DELAYER_MODES, PrefillDelayerRun

RANGE_RATIOS = [1.0, 0.8]
CONCURRENCY = [16, 64, 128]


class TrackPrefillDelayer:
    """Output tok/s and prefill steps; ISL = OSL = 1000, DP 4, 4 x concurrency requests."""

    params = (list(DELAYER_MODES), RANGE_RATIOS, CONCURRENCY)
    param_names = ["delayer", "range_ratio", "concurrency"]
    timeout = 300

    def setup(self, delayer, range_ratio, concurrency):
        with history_safe():
            self.workload = PrefillDelayerRun(delayer, range_ratio, concurrency)

    def track_output_throughput(self, delayer, range_ratio, concurrency):
        return self.workload.run()["output_tok_s"]

    track_output_throughput.unit = "tok/s"

    def track_prefill_steps(self, delayer, range_ratio, concurrency):
        return self.workload.run()["prefill_steps"]

    track_prefill_steps.unit = "steps"
