"""py-spy: one ``record -f raw`` per server process while the load runs, and its collapsed stacks."""

from __future__ import annotations

import gzip
import os
import re
import shutil
import signal
import subprocess
import threading
from collections import Counter
from pathlib import Path

_LINE_NO = re.compile(r":\d+\)$")


class ProfilerError(RuntimeError):
    """py-spy is missing or could not record a process."""


def find_py_spy(path: str | None = None) -> str:
    """The py-spy executable: ``path`` if given, else the one on PATH; a clear error if absent."""
    found = shutil.which(path) if path else shutil.which("py-spy")
    if not found:
        where = f"at {path!r}" if path else "on PATH"
        raise ProfilerError(f"py-spy not found {where}; install it with `pip install py-spy`")
    return found


class Recorder:
    """py-spy recorders attached to named pids, writing ``<out_dir>/<prefix>.<name>.txt``.

    Idle frames are left out (py-spy's default) and ``--nonblocking`` keeps py-spy from pausing
    the process at each sample, so profiling barely slows the server it measures.
    """

    def __init__(self, py_spy: str, pids: dict[str, int], out_dir: Path, prefix: str,
                 rate: int = 100, duration: float | None = None, preexec_fn=None):
        self.py_spy, self.pids, self.rate, self.duration = py_spy, pids, rate, duration
        self.preexec_fn = preexec_fn  # e.g. keep py-spy off the HTTP process's CPU
        self.paths = {name: out_dir / f"{prefix}.{name}.txt" for name in pids}
        self.procs: dict[str, subprocess.Popen] = {}
        self._readers: dict[str, _OutputReader] = {}

    def start(self, timeout: float = 60.0) -> Recorder:
        """Attach to every pid and wait until each py-spy says it is sampling; raise if one exits."""
        for name, pid in self.pids.items():
            cmd = [self.py_spy, "record", "-p", str(pid), "-r", str(self.rate), "-f", "raw",
                   "--nonblocking", "-o", str(self.paths[name])]
            if self.duration:
                cmd += ["-d", str(max(1, round(self.duration)))]
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                    start_new_session=True, preexec_fn=self.preexec_fn)
            self.procs[name] = proc
            self._readers[name] = _OutputReader(proc)
        for name, reader in self._readers.items():
            if not reader.sampling.wait(timeout) or reader.exited:
                self.kill()
                raise ProfilerError(f"py-spy on {name} (pid {self.pids[name]}) did not start sampling: "
                                    f"{reader.text()[-500:] or 'no output'}")
        return self

    def stop(self, timeout: float = 60.0) -> dict[str, Path]:
        """SIGINT every recorder (py-spy writes its output on SIGINT); the raw files by name."""
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
        for name, proc in self.procs.items():
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                raise ProfilerError(f"py-spy on {name} did not stop within {timeout:.0f} s") from None
            self._readers[name].thread.join(5)
            if not self.paths[name].exists():
                raise ProfilerError(f"py-spy on {name} wrote no profile (exit {proc.returncode}): "
                                    f"{self._readers[name].text()[-500:]}")
        return dict(self.paths)

    def kill(self) -> None:
        """Stop every recorder still running, by its own pid."""
        for proc in self.procs.values():
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()


class _OutputReader:
    """Drains a py-spy's output in a thread and notes when it starts sampling or exits."""

    def __init__(self, proc: subprocess.Popen):
        self.lines: list[str] = []
        self.sampling = threading.Event()
        self.exited = False
        self.thread = threading.Thread(target=self._read, args=(proc,), daemon=True)
        self.thread.start()

    def _read(self, proc: subprocess.Popen) -> None:
        for line in proc.stdout:
            self.lines.append(line)
            if "Sampling process" in line:
                self.sampling.set()
        self.exited = proc.poll() is not None or not self.sampling.is_set()
        self.sampling.set()

    def text(self) -> str:
        return "".join(self.lines).strip()


def parse_collapsed(text: str) -> Counter[tuple[str, ...]]:
    """Collapsed stacks (``a;b;c N`` per line, root first) to sample counts per stack.

    Line numbers are dropped from frames (``f (file.py:12)`` -> ``f (file.py)``) so that one
    function is one frame.
    """
    stacks: Counter[tuple[str, ...]] = Counter()
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        stacks[tuple(_LINE_NO.sub(")", frame) for frame in stack.split(";"))] += int(count)
    return stacks


def read_stacks(path: Path) -> Counter[tuple[str, ...]]:
    """Collapsed stacks from a raw py-spy file, plain or gzipped."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return parse_collapsed(f.read())


def gzip_file(path: Path) -> Path:
    """Replace ``path`` by ``path.gz``; the new path."""
    target = path.with_name(path.name + ".gz")
    with open(path, "rb") as src, gzip.open(target, "wb", compresslevel=9) as dst:
        shutil.copyfileobj(src, dst)
    path.unlink()
    return target
