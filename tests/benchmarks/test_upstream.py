"""benchmarks.upstream without sglang: the stubs, and the harness over three tiny fake "releases".

The fake trees carry the names the adapters look for (one release before `_fast_sse_content`,
with pydantic chunk models, one with it, one with it moved to `sse_utils` as in 0.5.13), so the
adapter choice, the child process, the
before/after join and the one-line errors run for real. Nothing is downloaded.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from benchmarks.upstream import harness, releases

PROTOCOL = '''
from typing import List, Optional, Union
from pydantic import BaseModel


class DeltaMessage(BaseModel):
    role: Optional[str] = None
    content: Optional[str] = None


class ChatCompletionResponseStreamChoice(BaseModel):
    index: int
    delta: DeltaMessage
    logprobs: Optional[dict] = None
    finish_reason: Optional[str] = None
    matched_stop: Union[None, int, str] = None


class ChatCompletionStreamResponse(BaseModel):
    id: str
    object: str = "chat.completion.chunk"
    created: int
    model: str
    choices: List[ChatCompletionResponseStreamChoice]
'''

FAST = '''
import json


def _fast_sse_content(chunk_id, created, model, index, role=None, content=None,
                      reasoning_content=None, finish_reason=None, logprobs=None,
                      matched_stop=None, usage=None):
    delta = {"reasoning_content": reasoning_content, "role": role, "content": content}
    return "data: " + json.dumps({"id": chunk_id, "choices": [{"index": index, "delta": delta,
                                  "finish_reason": finish_reason}]}) + "\\n\\n"
'''


def _release(cache: Path, version: str, serving_chat: str, sse_utils: str = "") -> None:
    """A fake release tree under ``cache``: just the H2 modules (stubbed torchvision imported)."""
    pkg = cache / "src" / version / "sglang"
    openai = pkg / "srt" / "entrypoints" / "openai"
    openai.mkdir(parents=True)
    for part in (pkg, pkg / "srt", pkg / "srt" / "entrypoints", openai):
        (part / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("from torchvision.io import decode_jpeg  # noqa: F401\n")
    (openai / "protocol.py").write_text(PROTOCOL)
    (openai / "serving_chat.py").write_text(serving_chat)
    if sse_utils:
        (openai / "sse_utils.py").write_text(sse_utils)


@pytest.fixture
def fake_cache(tmp_path, monkeypatch):
    monkeypatch.setattr(releases, "CACHE", tmp_path)
    _release(tmp_path, "0.0.1", "from sglang.srt.entrypoints.openai.protocol import DeltaMessage\n")
    _release(tmp_path, "0.0.2", FAST)
    _release(tmp_path, "0.0.3", "", FAST.replace("_fast_sse_content", "build_sse_content"))
    return tmp_path


def test_compare_picks_each_release_s_encoder_and_joins_before_after(fake_cache):
    result = harness.compare(["H2"], ["0.0.1", "0.0.2"], python=sys.executable)
    assert result["errors"] == []
    cases = {c["case"]: c for c in result["cases"]}
    assert sorted(cases) == ["h2-content-chunk", "h2-finish-chunk", "h2-first-chunk"]
    for case in cases.values():
        assert (case["before"], case["after"], case["unit"]) == ("0.0.1", "0.0.2", "us")
        assert case["functions"] == {
            "0.0.1": "protocol.ChatCompletionStreamResponse.model_dump_json",
            "0.0.2": "serving_chat._fast_sse_content"}
        assert case["ratio"] == pytest.approx(case["releases"]["0.0.2"] / case["releases"]["0.0.1"])
    table = harness.format_table(result)
    assert "0.0.1 -> 0.0.2" in table and "h2-first-chunk" in table


def test_the_encoder_moved_to_sse_utils_is_found_there(fake_cache):
    rows = harness.measure_release("0.0.3", ["H2"], python=sys.executable)
    assert {r["function"] for r in rows} == {"sse_utils.build_sse_content"}


def test_a_release_without_the_function_is_one_error_row(fake_cache):
    rows = harness.measure_release("0.0.2", ["H4"], python=sys.executable)
    assert len(rows) == 1 and (rows[0]["hot_path"], rows[0]["case"]) == ("H4", "h4-fill-rebuild-10k")
    assert rows[0]["error"].startswith("ModuleNotFoundError") and "\n" not in rows[0]["error"]


def test_a_missing_release_without_network_fails_in_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(releases, "CACHE", tmp_path)
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    # NOTE: a wheel that is not a zip: the unpack fails without any download being tried.
    (wheels / "sglang-9.9.9-py3-none-any.whl").write_text("not a zip")
    with pytest.raises(releases.ReleaseError, match="cannot be unpacked"):
        releases.ensure_source("9.9.9")


def test_stubs_serve_torchvision_and_sgl_kernel_placeholders_that_refuse_calls():
    code = textwrap.dedent("""
        from benchmarks.upstream import stubs
        stubs.install()
        from torchvision.io import decode_jpeg
        import torchvision.transforms as T
        import sgl_kernel
        x = T.InterpolationMode.BICUBIC
        try:
            decode_jpeg(b"")
        except NotImplementedError:
            print("refused")
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=releases.ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "refused"


def test_the_table_shows_a_ratio_of_a_zero_figure_as_na():
    case = {"hot_path": "H5", "case": "h5-decisions-differ", "unit": "passes", "before": "a",
            "after": "b", "releases": {"a": 0, "b": 8}, "functions": {"a": "f", "b": "f"},
            "ratio": None}
    line = harness.format_table({"cases": [case], "errors": [], "seconds": 1.0}).splitlines()[1]
    assert line.split()[-2] == "n/a" and "a -> b" in line
