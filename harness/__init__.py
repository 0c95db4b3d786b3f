"""The experiment harness: one way to run the reference server in a form under a load and read it.

Used by ``scripts/storm.py``, ``reportgen`` (profiling reports), the end-to-end benchmark and
the hardening figures; ``run_loadgen`` also drives third-party servers (``scripts/vllm_compare.py``).
"""

from harness import provenance
from harness.forms import Form, all_legacy, all_optimized, by_name, only_legacy
from harness.load import Load
from harness.run import PROCESSES, Profiling, RunError, RunResult, run_loadgen, run_under_load

__all__ = ["PROCESSES", "Form", "Load", "Profiling", "RunError", "RunResult", "all_legacy", "provenance",
           "all_optimized", "by_name", "only_legacy", "run_loadgen", "run_under_load"]
