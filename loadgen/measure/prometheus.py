"""The one Prometheus text reader: prometheus-client's parser, samples by name and labels.

`fetch` reads a `/metrics` body within bounds (bytes, samples, total time), keeping only the
sample lines asked for as they arrive: a hostile or broken target costs a failed scrape, never
the memory or the time of the process that scrapes it.
"""

from __future__ import annotations

import functools
import math
import re
import socket
import threading
from collections.abc import Iterator

import httpx
from prometheus_client.parser import text_string_to_metric_families

Labels = frozenset[tuple[str, str]]
#: Bounds of one scrape: the body's bytes (as decoded) and the sample lines kept.
MAX_BYTES = 16 << 20
MAX_SAMPLES = 10_000


class ScrapeError(ValueError):
    """A scrape past one of its bounds (bytes, samples, time)."""


class Metrics:
    """The samples of one ``/metrics`` scrape: ``value(name, **labels)`` and ``total(name, ...)``."""

    def __init__(self, samples: dict[tuple[str, Labels], float]):
        self.samples = samples

    def value(self, name: str, default: float = 0.0, **labels: str) -> float:
        """The sample with exactly these labels, else ``default``."""
        return self.samples.get((name, frozenset(labels.items())), default)

    def total(self, name: str, **labels: str) -> float:
        """The sum of every sample of ``name`` whose labels include ``labels``."""
        wanted = set(labels.items())
        return sum(v for (n, lab), v in self.samples.items()
                   if n == name and wanted <= lab and not math.isnan(v))

    def series(self, name: str) -> Iterator[tuple[dict[str, str], float]]:
        """Every ``(labels, value)`` of ``name``."""
        for (n, labels), value in self.samples.items():
            if n == name:
                yield dict(labels), value

    def __len__(self) -> int:
        return len(self.samples)


def parse(text: str) -> Metrics:
    """Prometheus text exposition → ``Metrics`` (counter samples keep their ``_total`` name)."""
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = float(sample.value)
    return Metrics(samples)


@functools.lru_cache(maxsize=16)
def _sample_pattern(names: frozenset[str] | None) -> re.Pattern[bytes]:
    if names is None:
        return re.compile(rb"^[^#\s].*$", re.MULTILINE)
    alternatives = b"|".join(re.escape(name.encode()) for name in sorted(names))
    return re.compile(rb"^(?:" + alternatives + rb")[{ \t].*$", re.MULTILINE)


class SampleLines:
    """The sample lines of `names` (every sample line when None) from a body read in pieces.

    Comments and other names are dropped as the pieces arrive, so memory holds what is kept;
    ScrapeError past `MAX_BYTES` of body or `MAX_SAMPLES` kept lines."""

    def __init__(self, names: frozenset[str] | None = None) -> None:
        self._pattern = _sample_pattern(names)
        self._which = "" if names is None else " of the names read"
        self._kept: list[bytes] = []
        self._tail: list[bytes] = []  # the last line so far, not yet ended
        self.num_bytes = 0

    def feed(self, piece: bytes) -> None:
        """Take the next piece of the body."""
        self.num_bytes += len(piece)
        if self.num_bytes > MAX_BYTES:
            raise ScrapeError(f"body past {MAX_BYTES >> 20} MiB")
        end = piece.rfind(b"\n") + 1
        if not end:
            self._tail.append(piece)
            return
        self._keep(b"".join(self._tail) + piece[:end])
        self._tail = [piece[end:]]

    def text(self) -> str:
        """The kept lines, once the body has ended."""
        self._keep(b"".join(self._tail))
        self._tail = []
        return b"\n".join(self._kept).decode("utf-8", "replace") + "\n"

    def _keep(self, lines: bytes) -> None:
        self._kept += self._pattern.findall(lines)
        if len(self._kept) > MAX_SAMPLES:
            raise ScrapeError(f"more than {MAX_SAMPLES:,} samples{self._which}")


class Deadline:
    """One request's total time: at `seconds` (or at `cut()`) its socket is shut down, so a read
    blocked anywhere in the response (head or body, plain or TLS) returns at once.

    Pass `trace` as the request's httpx `trace` extension (it sees the socket when it connects),
    and `close()` when the request is over."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.is_cut = False
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None  # NOTE: a dup: the fd cannot be reused while held
        self._is_closed = False
        self._timer = threading.Timer(seconds, self.cut)
        self._timer.daemon = True
        self._timer.start()

    def trace(self, event: str, info: dict) -> None:
        """The httpx trace hook: keep the connection's socket."""
        if event == "connection.connect_tcp.complete":
            with self._lock:
                if not self._is_closed:
                    self._sock = info["return_value"].get_extra_info("socket").dup()
                    if self.is_cut:
                        self._shutdown()

    def cut(self) -> None:
        """End the request now."""
        with self._lock:
            self.is_cut = True
            if self._sock is not None and not self._is_closed:
                self._shutdown()

    def close(self) -> None:
        """The request is over: no cut after this."""
        self._timer.cancel()
        with self._lock:
            self._is_closed = True
            if self._sock is not None:
                self._sock.close()

    def _shutdown(self) -> None:
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # already closed by the peer


def fetch(client: httpx.Client, url: str, deadline: Deadline, names: frozenset[str] | None = None) -> Metrics:
    """GET `url` and parse its sample lines of `names` (all with None), within the bounds of
    `SampleLines` and `deadline`; ScrapeError past a bound, httpx.HTTPError for an HTTP failure.

    The client should not keep connections alive: the deadline finds its socket on connect."""
    lines = SampleLines(names)
    try:
        with client.stream("GET", url, timeout=deadline.seconds, headers={"accept-encoding": "identity"},
                           extensions={"trace": deadline.trace}) as response:
            response.raise_for_status()
            for piece in response.iter_bytes():
                lines.feed(piece)
    except httpx.TransportError:
        if deadline.is_cut:
            raise ScrapeError(f"no whole answer within {deadline.seconds:g} s") from None
        raise
    finally:
        deadline.close()
    return parse(lines.text())


def scrape(url: str, timeout: float = 30.0) -> Metrics:
    """GET ``url`` + ``/metrics`` and parse it (every sample, within `fetch`'s bounds)."""
    with httpx.Client(limits=httpx.Limits(max_keepalive_connections=0)) as client:
        return fetch(client, url.rstrip("/") + "/metrics", Deadline(timeout))
