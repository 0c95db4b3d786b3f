"""Hostile files given to `loadgen report` and `loadgen compare`: refused in one line (exit 2), read
bounded, never a traceback; values from a file reach the page as text, never as markup or mathtext.

The valid files every variant starts from are real: a run and a sweep against the scripted server,
and the peers' files of tests/loadgen/peer_files (vLLM 0.32.0's real ones, SGLang's by hand)."""

from __future__ import annotations

import copy
import json
import os
import re
import resource
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from loadgen import cli
from loadgen.report import runfile
from loadgen.report.jsonfile import MAX_DEPTH, MAX_FILE_BYTES
from loadgen.selftest.testserver import spawn

SMALL = ("--random-input-len", "16", "--random-output-len", "6", "--quiet")
#: Each child may map this much memory: a reader that is not bounded fails instead of eating the machine.
CHILD_MEMORY = 3 * 2**30
MARKUP = "<script>window.injected=1</script><x-injected onclick='x'>$\\frac{$</x-injected>"
#: Values of the wrong type for each leaf kind of the schema.
WRONG = {runfile.NUM: ["12", True, [], {}, 1.5e15], runfile.NONNEG: [-1, "1", True, [], 1.5e15],
         runfile.RATE: ["12", True, [], {}, -1.5e15], runfile.STR: [7, False, [], {}],
         runfile.BOOL: [1, "true", []], runfile.OBJECT: [[], "x", 3],
         runfile.VARIABLE: ["temperature", 1, []],
         runfile.INTERVAL: [{"mean": "1"}, {"mean": 1, "low": 0}, {"mean": 1, "low": 2, "high": 3}, 5]}
#: Literals no loadgen file holds, put in place of any value: each is refused by the reader.
PEER_FILES = Path(__file__).parent / "peer_files"
#: Each kind of file the tests start from: its schema in runfile.
SPECS = {"run": runfile.RUN, "sweep": runfile.SWEEP, "vllm": runfile.VLLM, "sglang": runfile.SGLANG}
HOSTILE_LITERALS = ("NaN", "-Infinity", "1e999", "123456789012345678901234567890",
                    "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1))


def _loadgen(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    """`python -m loadgen ARGS` with its address space capped at CHILD_MEMORY."""
    cap = lambda: resource.setrlimit(resource.RLIMIT_AS, (CHILD_MEMORY, CHILD_MEMORY))  # noqa: E731
    return subprocess.run([sys.executable, "-m", "loadgen", *args], capture_output=True, text=True,
                          timeout=timeout, preexec_fn=cap)


@pytest.fixture(scope="module")
def real_files(tmp_path_factory) -> dict[str, dict]:
    """A run (with server metrics and server timing), a two-point sweep, and the peers' files
    (vLLM --save-detailed, SGLang --output-details), by kind."""
    folder = tmp_path_factory.mktemp("real")
    proc, url = spawn("--ttft-ms", "5", "--gap-ms", "2", "--num-tokens", "6", "--metrics", "vllm")
    try:
        run = _loadgen("--base-url", url, "--concurrency", "2", "--num-prompts", "6", *SMALL,
                       "--server-metrics-interval", "0.05", "--label", "real", "--output", str(folder / "run.json"))
        sweep = _loadgen("sweep", "--base-url", url, "--concurrency", "1,2", "--repeats", "2", "--slo", "ttft=80",
                         "--num-prompts", "4", "--no-server-metrics", *SMALL, "--output", str(folder / "sweep.json"))
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert run.returncode == 0 and sweep.returncode == 0, run.stderr + sweep.stderr
    files = {kind: json.loads((folder / f"{kind}.json").read_text()) for kind in ("run", "sweep")}
    files["vllm"] = json.loads((PEER_FILES / "vllm_0.32.0_detailed.json").read_text())
    files["sglang"] = json.loads((PEER_FILES / "sglang_bench_serving.jsonl").read_text().splitlines()[0])
    return files


def _main(*args: str, capsys) -> tuple[int, list[str]]:
    """`loadgen ARGS` in this process: its exit status and its stderr lines (a traceback fails the test)."""
    rc = cli.main(list(args))
    return rc, capsys.readouterr().err.strip().splitlines()


def _refused(path: Path, capsys, says: str = "") -> None:
    """Both commands refuse `path` with one line naming it (and `says`), exit 2, and write nothing."""
    out = path.with_suffix(".html")
    for args in (("report", str(path), "--output", str(out)), ("compare", str(path))):
        rc, err = _main(*args, capsys=capsys)
        assert rc == 2 and len(err) == 1, (args[0], err)
        assert str(path) in err[0] and says in err[0], err
    assert not out.exists()


def _put(data: dict, path: tuple, value) -> dict:
    """A copy of `data` with `value` at `path`, making the objects and lists on the way."""
    data = copy.deepcopy(data)
    node = data
    for key, nxt in zip(path, path[1:], strict=False):
        empty = [] if isinstance(nxt, int) else {}
        if isinstance(key, int):
            if not node:
                node.append(empty)
        elif not isinstance(node.get(key), type(empty)):
            node[key] = empty
        node = node[key]
    if isinstance(path[-1], int) and not node:
        node.append(None)
    node[path[-1]] = value
    return data


def _wrong_variants(spec, value, path: tuple = ()):
    """(field path, wrong value) for every field of `spec` (the schema), each wrong in every way
    WRONG lists; a required field also missing. List items start from the real file's first one."""
    if isinstance(spec, runfile.Req):
        yield path, None
        spec = spec.spec
    if isinstance(spec, runfile.Opt):
        spec = spec.spec
    if isinstance(spec, runfile.Kind):
        yield from ((path, wrong) for wrong in WRONG[spec])
    elif isinstance(spec, list):
        yield from ((path, wrong) for wrong in ({}, "x", 3))
        yield from _wrong_variants(spec[0], value[0] if value else None, (*path, 0))
    elif isinstance(spec, runfile.MapOf):
        yield from ((path, wrong) for wrong in ([], "x"))
        key = next(iter(value), "k") if isinstance(value, dict) else "k"
        yield from _wrong_variants(spec.spec, (value or {}).get(key), (*path, key))
    else:
        yield from ((path, wrong) for wrong in ([], "x", 3))
        for key, field in spec.items():
            yield from _wrong_variants(field, (value or {}).get(key), (*path, key))


def _leaf_paths(value, path: tuple = ()):
    """Every value's path in a file (lists through their first item)."""
    yield path
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _leaf_paths(item, (*path, key))
    elif isinstance(value, list) and value:
        yield from _leaf_paths(value[0], (*path, 0))


@pytest.mark.parametrize("kind", list(SPECS))
def test_every_field_of_the_wrong_type_is_one_line_naming_it(real_files, kind, tmp_path, capsys):
    base = real_files[kind]
    variants = list(_wrong_variants(SPECS[kind], base))
    assert len(variants) > (150 if kind in ("run", "vllm") else 60)
    path = tmp_path / "hostile.json"
    for field, wrong in variants:
        data = _put(base, field, wrong) if field else wrong
        path.write_text(json.dumps(data))
        last = f"[{field[-1]}]" if field and isinstance(field[-1], int) else str(field[-1]) if field else ""
        _refused(path, capsys, says=last)


@pytest.mark.parametrize("kind", list(SPECS))
def test_nan_infinity_huge_numbers_and_deep_nesting_anywhere_are_refused(real_files, kind, tmp_path, capsys):
    base, path = real_files[kind], tmp_path / "hostile.json"
    paths = [p for p in _leaf_paths(base) if p]
    assert len(paths) > (100 if kind in ("run", "sweep") else 40)
    for i, field in enumerate(paths):
        literal = HOSTILE_LITERALS[i % len(HOSTILE_LITERALS)]
        path.write_text(json.dumps(_put(base, field, "@HOSTILE@")).replace('"@HOSTILE@"', literal))
        rc, err = _main("report", str(path), "--output", str(tmp_path / "r.html"), capsys=capsys)
        assert rc == 2 and len(err) == 1 and str(path) in err[0], (field, literal, err)


@pytest.mark.parametrize("points", ["missing", None, [], "x"])
def test_a_sweep_without_points_is_refused(real_files, points, tmp_path, capsys):
    sweep = {k: v for k, v in real_files["sweep"].items() if k != "points"}
    if points != "missing":
        sweep["points"] = points
    path = tmp_path / "nopoints.json"
    path.write_text(json.dumps(sweep))
    _refused(path, capsys, says="points")


def test_special_files_and_files_past_the_bound_are_refused_without_reading(tmp_path, capsys):
    fifo, sparse, deep = tmp_path / "fifo.json", tmp_path / "sparse.json", tmp_path / "deep.json"
    os.mkfifo(fifo)
    with sparse.open("wb") as f:
        f.truncate(MAX_FILE_BYTES + 1)  # NOTE: sparse: no disk and nothing read
    deep.write_text("[" * 200_000 + "]" * 200_000)
    for path, says in ((fifo, "a FIFO, not a regular file"), (tmp_path, "a directory"),
                       (sparse, f"larger than {MAX_FILE_BYTES:,} bytes"), (deep, "nested deeper than")):
        _refused(path, capsys, says)


@pytest.mark.parametrize("command", ["report", "compare"])
def test_dev_zero_and_a_fifo_end_at_once_in_bounded_memory(command, tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path in ("/dev/zero", str(fifo)):
        args = (command, path, "--output", str(tmp_path / "r.html")) if command == "report" else (command, path)
        done = _loadgen(*args, timeout=120)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2 and len(lines) == 1 and "not a regular file" in lines[0], done.stderr[-500:]


def test_markup_in_every_string_field_stays_text_in_the_dom(real_files, tmp_path, chromium):
    for kind, data in real_files.items():
        path, page = tmp_path / f"{kind}.json", tmp_path / f"{kind}.html"
        extra = {}
        if kind in ("vllm", "sglang"):  # a --metadata KEY=VALUE; `errors` kept, so requests stay ok
            extra = {f"note{MARKUP}": MARKUP, "errors": data["errors"]}
        path.write_text(json.dumps(_marked(data) | extra))
        done = _loadgen("report", str(path), "--output", str(page))
        assert done.returncode == 0, done.stderr
        dom = chromium(tmp_path / "profile", "--dump-dom", page.as_uri()).stdout
        tags = _tags(dom)
        assert "body" in tags and "img" in tags, dom[:500]
        assert not {"script", "x-injected"} & tags.keys(), kind
        assert not any(a.startswith("on") for attrs in tags.values() for a in attrs), kind
        assert dom.count("&lt;x-injected onclick='x'&gt;") >= 3, kind  # the strings are on the page, as text


def test_markup_in_a_number_field_is_refused_not_drawn(real_files, tmp_path, capsys):
    path = tmp_path / "sweep.json"
    for field in (("repeats",), ("points", 0, "value"), ("slo_percentile",), ("early_stop", "stopped_at")):
        path.write_text(json.dumps(_put(real_files["sweep"], field, MARKUP)))
        _refused(path, capsys, says=field[-1] if isinstance(field[-1], str) else "value")


@pytest.mark.parametrize("where", ["flag", "file"])
def test_labels_are_text_not_mathtext(real_files, where, tmp_path):
    label = "$\\frac{$ and $x^$"
    data = {**real_files["run"], "label": label if where == "file" else "run"}
    path, page = tmp_path / "run.json", tmp_path / "r.html"
    path.write_text(json.dumps(data))
    flags = ("--label", label) if where == "flag" else ()
    done = _loadgen("report", str(path), "--output", str(page), *flags)
    assert done.returncode == 0, done.stderr[-1000:]
    assert label in page.read_text() and page.read_text().count("<img ") == 5
    sweep = tmp_path / "sweep.json"
    sweep.write_text(json.dumps({**real_files["sweep"], "label": label}))
    done = _loadgen("report", str(sweep), "--output", str(tmp_path / "s.html"), *flags)
    assert done.returncode == 0, done.stderr[-1000:]


def _marked(data):
    """`data` with every string MARKUP (and the keys of the objects a page lists), but the kind and
    the sweep variable, which are names loadgen checks."""
    if isinstance(data, dict):
        out = {}
        for key, value in data.items():
            if key in ("kind", "variable"):
                out[key] = value
            elif key in ("config", "environment", "rules") and isinstance(value, dict):
                out[key] = {f"{k}{MARKUP}": _marked(v) for k, v in value.items()}
            else:
                out[key] = _marked(value)
        return out
    if isinstance(data, list):
        return [_marked(v) for v in data]
    return MARKUP if isinstance(data, str) else data


def _tags(dom: str) -> dict[str, set[str]]:
    """Each element name in `dom` with every attribute name it carries anywhere."""
    tags: dict[str, set[str]] = {}

    class Collect(HTMLParser):
        def handle_starttag(self, tag, attrs):
            tags.setdefault(tag, set()).update(name for name, _ in attrs)

    Collect().feed(dom)
    return tags


def test_one_reader_for_loadgen_and_reportgen():
    """`report`, `compare` and reportgen read saved JSON through `jsonfile` only."""
    root = Path(cli.__file__).resolve().parent.parent
    for name in ("loadgen/report/runfile.py", "reportgen/output.py", "reportgen/reproduction.py"):
        text = (root / name).read_text()
        assert "read_json" in text and not re.search(r"json\.loads?\(", text), name
