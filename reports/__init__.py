"""Profiling reports: py-spy flamegraphs of every server process under load, legacy vs optimized.

``python -m reports run SCENARIO`` starts the reference server in each form of a scenario,
drives it with loadgen while py-spy samples every server process, and writes
``reports/<scenario>/`` (index.html, README.md, loadgen results, raw profiles).
"""

from reports.runner import ReportError, run_scenario
from reports.scenarios import SCENARIOS, SMALLEST_SCALE, Load, Run, Scenario

__all__ = ["SCENARIOS", "SMALLEST_SCALE", "Load", "ReportError", "Run", "Scenario", "run_scenario"]
