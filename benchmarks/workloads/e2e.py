"""End to end: the reference server and loadgen on 127.0.0.1, all-legacy vs all-optimized.

Small scale (256 streams, short outputs) so it fits a 2-core machine; the server uses the
sim engine's default latency profile and real clock.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.common import SEED, history_safe

E2E_CONFIGS = {"all-legacy": ["--all-legacy"], "all-optimized": []}


def e2e_run(config: str, concurrency: int = 256, input_len: int = 128, output_len: int = 64,
            timeout: float = 300.0) -> dict:
    """Start a server in ``config``, run loadgen against it, stop it; loadgen's result JSON."""
    with history_safe():
        from reference_impl.subprocess_server import ServerProcess

        if importlib.util.find_spec("loadgen") is None:
            raise ImportError("no loadgen package")
    flags = E2E_CONFIGS[config]
    with tempfile.TemporaryDirectory() as tmp, ServerProcess(*flags) as server:
        output = Path(tmp) / "result.json"
        cmd = [sys.executable, "-m", "loadgen", "--base-url", server.url, "--backend", "openai-chat",
               "--concurrency", str(concurrency), "--num-prompts", str(concurrency),
               "--random-input-len", str(input_len), "--random-output-len", str(output_len),
               "--random-range-ratio", "1.0", "--ignore-eos", "--seed", str(SEED), "--workers", "1",
               "--quiet", "--output", str(output)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0 or not output.exists():
            raise RuntimeError(f"loadgen failed ({proc.returncode}): {proc.stderr[-2000:]}")
        return json.loads(output.read_text())
