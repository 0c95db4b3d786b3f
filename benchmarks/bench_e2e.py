"""End to end: server and loadgen on 127.0.0.1, 256 chat streams, all-legacy vs all-optimized."""

from benchmarks.workloads import E2E_CONFIGS, e2e_run


class TrackEndToEnd:
    """Output tokens/s and p99 ITL of one loadgen run per configuration (slow: not in CI)."""

    params = list(E2E_CONFIGS)
    param_names = ["config"]
    timeout = 900

    def setup_cache(self):
        try:
            return {config: e2e_run(config) for config in E2E_CONFIGS}
        except NotImplementedError:
            return None

    def setup(self, results, config):
        if results is None:
            raise NotImplementedError("no server or loadgen at this commit")

    def track_output_throughput(self, results, config):
        return results[config]["output_throughput"]

    track_output_throughput.unit = "tok/s"

    def track_p99_itl_ms(self, results, config):
        return results[config]["p99_itl_ms"]

    track_p99_itl_ms.unit = "ms"
