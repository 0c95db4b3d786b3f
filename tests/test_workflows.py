"""The CI workflow (.github/workflows/guard.yml) runs what the README says: the asv guard on pull
requests with valgrind and the whole history, its summary and pages kept; loadgen's baseline gate
from the base install. (`actionlint` checks the syntax: README, "CI".)"""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def _workflow() -> dict:
    return yaml.safe_load((ROOT / ".github/workflows/guard.yml").read_text())


def _runs(job: dict) -> str:
    return "\n".join(step.get("run", "") for step in job["steps"])


def test_the_guard_runs_on_pull_requests_against_main_with_valgrind_and_full_history():
    flow = _workflow()
    assert list(flow[True]) == ["pull_request"]  # NOTE: YAML 1.1 reads the key `on` as true
    asv = flow["jobs"]["asv"]
    checkout = next(s for s in asv["steps"] if s.get("uses", "").startswith("actions/checkout@"))
    assert checkout["with"]["fetch-depth"] == 0
    assert "apt-get install -y valgrind" in _runs(asv)
    assert "bash scripts/asv_ci.sh origin/main HEAD" in _runs(asv)
    assert "python -m asv publish" in _runs(asv)
    upload = next(s for s in asv["steps"] if s.get("uses", "").startswith("actions/upload-artifact@"))
    assert ".asv/html" in upload["with"]["path"] and upload["if"] == "always()"


def test_the_loadgen_gate_installs_no_extra_and_fails_on_a_stated_regression():
    job = _workflow()["jobs"]["loadgen-baseline"]
    runs = _runs(job)
    assert "python -m pip install .\n" in runs + "\n" and "[server]" not in runs
    baseline = "tests/loadgen/baselines/scripted-ttft50.json"
    assert (ROOT / baseline).is_file()
    assert f"loadgen --config {baseline}" in runs and f"loadgen compare {baseline} run.json" in runs
    assert "--fail-on" in runs
