"""The results JSON: strict JSON whatever the numbers (no NaN, no Infinity)."""

from __future__ import annotations

import math

from loadgen.report.results import save_result, write_json


def test_non_finite_numbers_are_written_as_strict_json(tmp_path, strict_json):
    data = {"label": "x", "request_rate": math.inf, "summary": {"ttft_split": {"mean_ms": {"queue": math.nan}},
            "low": -math.inf, "values": [1.5, math.nan, (math.inf, 2)]}}
    path = tmp_path / "r.json"
    write_json(str(path), data)
    saved = save_result(data, str(tmp_path), "s.json", append=False)
    for text in (path.read_text(), (tmp_path / "s.json").read_text()):
        assert strict_json(text) == {"label": "x", "request_rate": "inf", "summary": {
            "ttft_split": {"mean_ms": {"queue": None}}, "low": "-inf", "values": [1.5, None, ["inf", 2]]}}
    assert saved == str(tmp_path / "s.json")
