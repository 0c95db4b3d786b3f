"""Where the server's processes and the load generator run: CPU affinity for figures worth reporting.

On a small machine the client, the HTTP process, the scheduler and the detokenizer compete for
the same cores, and a figure for the HTTP process (the one the streaming hot paths live in) is
clean only when that process has a core of its own. ``Placement`` pins the HTTP process to its
CPUs and everything else (the launcher, scheduler, detokenizer, the load generator, py-spy) to
the others. On this project's 2-core machine: HTTP on CPU 1, the rest on CPU 0.

An outside harness gets close with ``taskset -c 1 python -m reference_impl …`` and
``taskset -c 0 loadgen --workers 1 …`` (there the scheduler and detokenizer share the HTTP core).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass

PLACEMENT_HELP = ("'pinned' (default with 2+ CPUs: the HTTP process on the last CPU, everything "
                  "else, the client included, on the others), 'shared' (no pinning), or "
                  "'HTTP_CPUS:OTHER_CPUS', e.g. '1:0' or '2,3:0,1'")


@dataclass(frozen=True)
class Placement:
    """CPUs of the HTTP process, and of every other process (server and client)."""

    http_cpus: tuple[int, ...]
    other_cpus: tuple[int, ...]

    def __post_init__(self) -> None:
        if not self.http_cpus or not self.other_cpus:
            raise ValueError("a placement needs CPUs for the HTTP process and for the rest")
        if set(self.http_cpus) & set(self.other_cpus):
            raise ValueError(f"HTTP CPUs {self.http_cpus} overlap the others {self.other_cpus}")

    @classmethod
    def default(cls) -> Placement | None:
        """The HTTP process on the last usable CPU, the rest on the others; None on one CPU."""
        cpus = sorted(os.sched_getaffinity(0))
        return cls((cpus[-1],), tuple(cpus[:-1])) if len(cpus) >= 2 else None

    @classmethod
    def parse(cls, spec: str) -> Placement | None:
        """``pinned``, ``shared`` (None) or ``HTTP_CPUS:OTHER_CPUS``; ValueError otherwise."""
        if spec == "shared":
            return None
        if spec == "pinned":
            placement = cls.default()
            if placement is None:
                raise ValueError("'pinned' needs at least 2 CPUs; use 'shared'")
            return placement
        http, sep, other = spec.partition(":")
        if not sep:
            raise ValueError(f"placement must be pinned, shared or HTTP_CPUS:OTHER_CPUS, got {spec!r}")
        return cls(_cpu_list(http), _cpu_list(other))

    @property
    def num_client_cpus(self) -> int:
        return len(self.other_cpus)

    def pin_server(self, pids: dict[str, int], launcher_pid: int) -> None:
        """Pin the server: ``pids`` maps process names (http, scheduler, …) to pids."""
        pin(launcher_pid, self.other_cpus)
        for name, pid in pids.items():
            pin(pid, self.http_cpus if name == "http" else self.other_cpus)

    def client_preexec(self) -> Callable[[], None]:
        """A ``preexec_fn`` that puts a child process (loadgen, py-spy) on the other CPUs."""
        cpus = self.other_cpus
        return lambda: os.sched_setaffinity(0, cpus)

    def describe(self) -> str:
        return (f"HTTP process on CPU {_fmt(self.http_cpus)}; scheduler, detokenizer and client "
                f"on CPU {_fmt(self.other_cpus)}")


def pin(pid: int, cpus: Iterable[int]) -> None:
    """Set the affinity of every thread of ``pid`` (new threads inherit it)."""
    cpus = set(cpus)
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            os.sched_setaffinity(int(tid), cpus)
        except ProcessLookupError:  # a thread that ended meanwhile
            continue


def describe(placement: Placement | None) -> str:
    """One line for reports and logs."""
    return placement.describe() if placement else "no pinning: client and server share every CPU"


def _cpu_list(text: str) -> tuple[int, ...]:
    try:
        cpus = tuple(sorted({int(part) for part in text.split(",") if part.strip()}))
    except ValueError:
        raise ValueError(f"CPU list must be comma-separated integers, got {text!r}") from None
    usable = os.sched_getaffinity(0)
    if not cpus or not set(cpus) <= usable:
        raise ValueError(f"CPUs {text!r} are not all usable here (usable: {sorted(usable)})")
    return cpus


def _fmt(cpus: tuple[int, ...]) -> str:
    return ",".join(map(str, cpus))
