"""The machine description on each report."""

from __future__ import annotations

import re

from harness.profiler import find_py_spy
from reportgen.machine import commit, describe


def test_describe_names_the_machine_and_versions():
    info = describe(find_py_spy())
    assert set(info) >= {"CPU", "cores", "GPU", "Python", "torch", "py-spy", "commit"}
    assert re.match(r"\d+\.\d+", info["py-spy"])
    assert info["cores"].split()[0].isdigit()


def test_commit_is_a_short_hash():
    assert re.fullmatch(r"[0-9a-f]{7,12}(\+dirty)?|unknown", commit())
