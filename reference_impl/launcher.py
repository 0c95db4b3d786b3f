"""Starts the three server processes, waits for each to be ready, and tears them all down.

Any child dying ends the server with a non-zero exit naming it; Ctrl-C and SIGTERM stop every
child; a child whose launcher vanishes is killed by the kernel (PR_SET_PDEATHSIG), and the IPC
directory is then removed by a reaper that outlives the launcher.
"""

from __future__ import annotations

import ctypes
import dataclasses
import importlib
import ipaddress
import logging
import multiprocessing as mp
import signal
import socket
import subprocess
import sys
import tempfile
import time
from multiprocessing.connection import Connection, wait
from typing import NamedTuple

from reference_impl.config import ServerArgs, from_cli

logger = logging.getLogger("reference_impl.launcher")

PROCESSES = {
    "scheduler": "reference_impl.scheduler.process:run",
    "detokenizer": "reference_impl.detokenizer.process:run",
    "http": "reference_impl.server.process:run",
}
_READY_TIMEOUT_S = 180.0
_STOP_TIMEOUT_S = 5.0
_PR_SET_PDEATHSIG = 1
_PR_SET_NAME = 15
COMM_PREFIX = "ref-"  # /proc/PID/comm of each child: ref-scheduler, ref-detokenizer, ref-http


class ChildDied(RuntimeError):
    """A server process exited while the server was meant to be running."""


class Ready(NamedTuple):
    """What a child reports once it serves; the HTTP process adds the port it listens on."""

    name: str
    port: int | None = None


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m reference_impl``: serve until stopped; the exit status."""
    args = from_cli(argv)
    _setup_logging(args.log_level)
    if args.api_key is None and not _is_loopback(args.host):
        print(f"reference_impl: warning: --host {args.host} is not a loopback address and the "
              "server has no authentication: anyone who can reach it can use it (set --api-key)",
              file=sys.stderr, flush=True)
    port_error = _port_in_use(args.host, args.port)
    if port_error:
        print(f"reference_impl: error: {port_error}", file=sys.stderr)
        return 1
    signal.signal(signal.SIGTERM, _raise_exit)
    with tempfile.TemporaryDirectory(prefix="reference-impl-") as ipc_dir:
        reaper = _remove_when_gone(ipc_dir)
        status = _serve(dataclasses.replace(args, ipc_dir=ipc_dir))
    reaper.stdin.close()  # the directory is gone; the reaper ends
    return status


def _serve(args: ServerArgs) -> int:
    """Start the children, print the ready line and wait; the exit status."""
    launcher = Launcher(args)
    try:
        launcher.start()
        print(ready_line(args, launcher.port), flush=True)
        launcher.wait()
    except ChildDied as exc:
        print(f"reference_impl: error: {exc}", file=sys.stderr, flush=True)
        return 1
    except (KeyboardInterrupt, SystemExit) as stop:
        # NOTE: a stop asked for (Ctrl-C, SIGTERM) is routine, not a warning.
        logger.info("stopping (%s)", "Ctrl-C" if isinstance(stop, KeyboardInterrupt) else "SIGTERM")
    finally:
        launcher.stop()
    return 0


def ready_line(args: ServerArgs, port: int) -> str:
    """`reference_impl ready on http://HOST:PORT with forms H1 optimized, H2 legacy, ...`."""
    forms = ", ".join(f"{hot_path} {form}" for hot_path, form in args.hot_path_forms().items())
    return f"reference_impl ready on http://{args.host}:{port} with forms {forms}"


class Launcher:
    """Owns the child processes of one server."""

    def __init__(self, args: ServerArgs):
        self.args = args
        self.procs: dict[str, mp.Process] = {}
        self._ready: dict[str, Connection] = {}
        self.port = args.port
        """The HTTP port, as bound (``--port 0``: the one the kernel chose), once started."""

    def start(self) -> None:
        """Start every process and return once all report ready."""
        ctx = mp.get_context("spawn")
        for name, target in PROCESSES.items():
            reader, writer = ctx.Pipe(duplex=False)
            proc = ctx.Process(target=_child_main, name=name, daemon=True,
                               args=(name, target, self.args, writer))
            proc.start()
            writer.close()
            self.procs[name], self._ready[name] = proc, reader
        self._wait_ready()

    def wait(self) -> None:
        """Block until a child exits (then raise ``ChildDied``)."""
        by_sentinel = {p.sentinel: name for name, p in self.procs.items()}
        ready = wait(list(by_sentinel))
        name = by_sentinel[ready[0]]
        raise ChildDied(self._death_message(name))

    def stop(self) -> None:
        """Terminate every child still alive, then kill what does not stop in time."""
        for proc in self.procs.values():
            if proc.is_alive():
                proc.terminate()
        deadline = time.monotonic() + _STOP_TIMEOUT_S
        for proc in self.procs.values():
            proc.join(max(0.0, deadline - time.monotonic()))
            if proc.is_alive():
                proc.kill()
                proc.join()

    def _wait_ready(self) -> None:
        pending = dict(self._ready)
        sentinels = {p.sentinel: name for name, p in self.procs.items()}
        deadline = time.monotonic() + _READY_TIMEOUT_S
        while pending:
            timeout = deadline - time.monotonic()
            if timeout <= 0:
                raise ChildDied(f"processes {sorted(pending)} not ready after {_READY_TIMEOUT_S:.0f} s")
            for obj in wait([*pending.values(), *sentinels], timeout):
                if obj in sentinels:
                    raise ChildDied(self._death_message(sentinels[obj]))
                name = next(n for n, c in pending.items() if c is obj)
                try:
                    message = obj.recv()
                except EOFError:
                    raise ChildDied(self._death_message(name)) from None
                if not isinstance(message, Ready) or message.name != name:
                    raise ChildDied(f"the {name} process failed to start: {message}")
                if message.port is not None:
                    self.port = message.port
                del pending[name]

    def _death_message(self, name: str) -> str:
        proc = self.procs[name]
        proc.join(1.0)
        return f"the {name} process (pid {proc.pid}) exited with code {proc.exitcode}"


def _child_main(name: str, target: str, args: ServerArgs, ready: Connection) -> None:
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    _prctl(_PR_SET_NAME, ctypes.create_string_buffer((COMM_PREFIX + name).encode()[:15]))
    # NOTE: Ctrl-C reaches the whole process group; only the launcher acts on it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _setup_logging(args.log_level)
    module, func = target.split(":")
    run = getattr(importlib.import_module(module), func)

    def report_ready(port: int | None = None) -> None:
        ready.send(Ready(name, port))
        ready.close()

    try:
        run(args, report_ready)
    except Exception as exc:
        # NOTE: one clear line for the launcher to print; the traceback only at debug level.
        logging.getLogger(f"reference_impl.{name}").debug("%s process failed", name, exc_info=True)
        if not ready.closed:
            ready.send(f"{type(exc).__name__}: {exc}")
        else:
            logging.getLogger(f"reference_impl.{name}").error("%s process failed: %s", name, exc)
        sys.exit(1)


def _remove_when_gone(path: str) -> subprocess.Popen:
    """A tiny process that removes ``path`` once this process is gone, however it ends (``kill
    -9`` too): it reads a pipe whose only writer is this process, so it sees the end of input
    when the kernel closes the pipe. Its own session keeps a Ctrl-C or a group kill off it."""
    return subprocess.Popen(["sh", "-c", 'cat > /dev/null; rm -rf -- "$1"', "reference-impl-reaper",
                             path], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)


def _is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (a host name other than localhost counts as not)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _port_in_use(host: str, port: int) -> str | None:
    """A message when ``host:port`` cannot be bound now, else None (port 0 is always free)."""
    if port == 0:
        return None
    with socket.socket() as sock:
        try:
            sock.bind((host, port))
        except OSError as exc:
            return f"cannot listen on {host}:{port}: {exc.strerror or exc}"
    return None


def _prctl(option: int, arg) -> None:
    """Linux prctl(2); a no-op where libc has none."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(option, arg)
    except (OSError, AttributeError):
        pass


def _raise_exit(signum, frame) -> None:
    raise SystemExit(0)


def _setup_logging(level: str) -> None:
    logging.basicConfig(level=level.upper(), format="%(asctime)s %(processName)s %(levelname)s %(message)s")
