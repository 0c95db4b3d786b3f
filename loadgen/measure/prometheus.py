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

    def __init__(self, samples: dict[tuple[str, Labels], float], counters: frozenset[str] = frozenset(),
                 num_dropped: int = 0):
        self.samples = samples
        self.counters = counters  # NOTE: sample names that only grow (counters, histogram parts)
        self.num_dropped = num_dropped  # series past the scrape's cap, not kept

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


#: Family types whose samples only grow (a histogram's and a summary's `_sum`, `_count`, `_bucket`).
_CUMULATIVE_TYPES = frozenset({"counter", "histogram", "summary"})
_CUMULATIVE_SUFFIXES = ("_total", "_count", "_sum", "_bucket")


def parse(text: str, num_dropped: int = 0) -> Metrics:
    """Prometheus text exposition → ``Metrics`` (counter samples keep, or get, their ``_total``
    name); a sample is a counter where its `# TYPE` says so, else where its name ends as one does."""
    samples, counters = {}, set()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = float(sample.value)
            if _is_counter(family.type, sample.name, sample.labels):
                counters.add(sample.name)
    return Metrics(samples, frozenset(counters), num_dropped)


def _is_counter(family_type: str, name: str, labels: dict) -> bool:
    if name.endswith("_created") or "quantile" in labels:
        return False
    if family_type in _CUMULATIVE_TYPES:
        return True
    return family_type in ("unknown", "untyped") and name.endswith(_CUMULATIVE_SUFFIXES)


_ANY_SAMPLE = re.compile(rb"^[^#\s].*$", re.MULTILINE)
_NO_LINE = re.compile(rb"(?!)")
_SAMPLE_START = re.compile(rb"^[^#\s]", re.MULTILINE)  # NOTE: counts sample lines, keeps 1 byte each
_SAMPLE_OR_TYPE = re.compile(rb"^(?:# TYPE .*|[^#\s].*)$", re.MULTILINE)


@functools.lru_cache(maxsize=16)
def _sample_pattern(names: frozenset[str] | None) -> re.Pattern[bytes]:
    if names is None:
        return _ANY_SAMPLE
    if not names:
        return _NO_LINE
    alternatives = b"|".join(re.escape(name.encode()) for name in sorted(names))
    return re.compile(rb"^(?:" + alternatives + rb")[{ \t].*$", re.MULTILINE)


class SampleLines:
    """The sample lines of `names` (every sample line when None) from a body read in pieces, and
    with `max_series` also the first `max_series` lines of other names (and the `# TYPE` lines),
    the rest of them counted in `num_dropped`.

    Comments and other names are dropped as the pieces arrive, so memory holds what is kept;
    ScrapeError past `MAX_BYTES` of body or `MAX_SAMPLES` kept lines of `names`."""

    def __init__(self, names: frozenset[str] | None = None, max_series: int | None = None) -> None:
        self._pattern = _sample_pattern(names)
        self._which = "" if names is None else " of the names read"
        self._lines: list[bytes] = []  # NOTE: kept lines of `names`, and at most max_series others
        self._num_kept = self._num_others = self._num_types = 0
        self._max_series = 0 if names is None else max_series or 0
        self._tail: list[bytes] = []  # the last line so far, not yet ended
        self.num_bytes = 0
        self.num_dropped = 0

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
        return b"\n".join(self._lines).decode("utf-8", "replace") + "\n"

    def _keep(self, lines: bytes) -> None:
        kept = self._pattern.findall(lines)
        self._num_kept += len(kept)
        if self._num_kept > MAX_SAMPLES:
            raise ScrapeError(f"more than {MAX_SAMPLES:,} samples{self._which}")
        if not self._max_series:
            self._lines += kept
        elif self._num_others >= self._max_series:
            # NOTE: past the cap, C-speed regexes only (a `# TYPE` line is no longer kept)
            self._lines += kept
            self.num_dropped += len(_SAMPLE_START.findall(lines)) - len(kept)
        else:
            self._keep_in_order(lines, set(kept))

    def _keep_in_order(self, lines: bytes, wanted: set[bytes]) -> None:
        # NOTE: in the body's order, so that a `# TYPE` line stays before its family's samples.
        for line in _SAMPLE_OR_TYPE.findall(lines):
            if line in wanted:
                self._lines.append(line)
            elif line.startswith(b"#"):
                if self._num_types < self._max_series:
                    self._lines.append(line)
                    self._num_types += 1
            elif self._num_others < self._max_series:
                self._lines.append(line)
                self._num_others += 1
            else:
                self.num_dropped += 1


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


def fetch(client: httpx.Client, url: str, deadline: Deadline, names: frozenset[str] | None = None,
          max_series: int | None = None) -> Metrics:
    """GET `url` and parse its sample lines of `names` (all with None) and `max_series` others,
    within the bounds of `SampleLines` and `deadline`; ScrapeError past a bound, httpx.HTTPError for
    an HTTP failure.

    The client should not keep connections alive: the deadline finds its socket on connect."""
    lines = SampleLines(names, max_series)
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
    return parse(lines.text(), lines.num_dropped)


def scrape(url: str, timeout: float = 30.0) -> Metrics:
    """GET ``url`` + ``/metrics`` and parse it (every sample, within `fetch`'s bounds)."""
    with httpx.Client(limits=httpx.Limits(max_keepalive_connections=0)) as client:
        return fetch(client, url.rstrip("/") + "/metrics", Deadline(timeout))
