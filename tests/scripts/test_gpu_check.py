"""scripts/gpu_check.sh survives its own failures: a phase that hangs is stopped by its timeout,
one that fails is recorded, and the next phase runs either way; each phase's line lands in
phases.tsv as it ends; the serve phase fails when the client saw far fewer content events than
the server's output tokens; the budget skips what it cannot hold. A stand-in python plays the
parts (pytest hangs, the benchmark fails, a server that answers /health, a loadgen that writes
the given results), everything else is the real python."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu_check.sh"
FAKE_PYTHON = f"""#!{sys.executable}
import http.server, json, os, sys, time
args = sys.argv[1:]
if "pytest" in args:
    time.sleep(120)  # a stuck test run
elif "benchmarks/torch_engine.py" in args:
    sys.exit("benchmark broke")
elif args[:3] == ["-m", "reference_impl", "--engine"]:
    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()
        def log_message(self, *_):
            pass
    port = int(args[args.index("--port") + 1])
    http.server.HTTPServer(("127.0.0.1", port), Health).serve_forever()
elif args[:2] == ["-m", "loadgen"]:
    with open(os.environ["LOADGEN_ARGS"], "w") as f:
        json.dump(args, f)
    with open(args[args.index("--output") + 1], "w") as f:
        f.write(os.environ["LOADGEN_RESULT"])
else:
    os.execv({sys.executable!r}, [{sys.executable!r}, *args])
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(tmp_path: Path, *args: str, result: dict | None = None, **env: str):
    fake = tmp_path / "python"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    model_dir = tmp_path / "model"
    model_dir.mkdir(exist_ok=True)
    (model_dir / "config.json").write_text("{}")
    out = tmp_path / "out"
    env = {**os.environ, "PYTHON": str(fake), "OUT": str(out), "MODEL_DIR": str(model_dir),
           "PORT": str(_free_port()), "WHEEL_DIR": str(tmp_path / "no-wheels"),
           "LOADGEN_ARGS": str(tmp_path / "loadgen_args.json"),
           "LOADGEN_RESULT": json.dumps(result or {}), **env}
    done = subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True,
                          timeout=240)
    rows = [line.split("\t") for line in (out / "phases.tsv").read_text().splitlines()[1:]]
    return done, {row[0]: row[1:] for row in rows}


def test_a_hung_and_a_failed_phase_do_not_stop_the_next(tmp_path):
    good = {"completed": 8, "failed": 0, "total_output_tokens": 1024,
            "total_output_tokens_client": 900}
    done, phases = _run(tmp_path, "all", result=good, TESTS_TIMEOUT_S="3")
    assert done.returncode == 1, done.stdout + done.stderr
    assert phases["tests"][0] == "124" and "TIMED OUT" in phases["tests"][2]
    assert phases["bench"][0] == "1" and phases["bench"][2] == "FAILED"
    assert phases["serve"][0] == "0", done.stdout + done.stderr
    assert "900 content events for 1024 output tokens" in done.stdout
    assert "open files: soft limit" in done.stdout
    loadgen_args = " ".join(json.loads((tmp_path / "loadgen_args.json").read_text()))
    assert ("--random-input-len 128 --random-output-len 128 --random-range-ratio 1"
            in loadgen_args)


def test_serve_fails_when_content_events_are_far_below_output_tokens(tmp_path):
    undecodable = {"completed": 64, "failed": 0, "total_output_tokens": 7645,
                   "total_output_tokens_client": 17}
    done, phases = _run(tmp_path, "serve", result=undecodable)
    assert done.returncode == 1 and phases["serve"][0] == "1"
    assert "content events are 0.00 of the output tokens" in done.stderr


def test_serve_fails_when_requests_failed(tmp_path):
    some_failed = {"completed": 60, "failed": 4, "total_output_tokens": 7680,
                   "total_output_tokens_client": 7600}
    done, phases = _run(tmp_path, "serve", result=some_failed)
    assert done.returncode == 1 and phases["serve"][0] == "1"
    assert "60 completed, 4 failed" in done.stdout


def test_a_phase_the_budget_cannot_hold_is_skipped_and_recorded(tmp_path):
    done, phases = _run(tmp_path, "--budget-s", "25", "tests", "bench", TESTS_TIMEOUT_S="8")
    assert done.returncode == 1
    assert phases["tests"][0] == "124" and phases["bench"][:2] == ["skipped", "0"]
    assert "== bench: SKIPPED" in done.stdout
