"""Profiling reports: py-spy flamegraphs of every server process under load, legacy vs optimized.

``python -m reportgen run SCENARIO`` starts the reference server in each form of a scenario,
drives it with loadgen while py-spy samples every server process, and writes
``reports/<scenario>/`` (index.html, README.md, loadgen results, raw profiles).
"""

from reportgen.runner import ReportError, run_scenario
from reportgen.scenarios import SCENARIOS, SMALLEST_SCALE, Run, Scenario

__all__ = ["SCENARIOS", "SMALLEST_SCALE", "ReportError", "Run", "Scenario", "run_scenario"]
