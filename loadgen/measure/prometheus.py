"""The one Prometheus text reader: prometheus-client's parser, samples by name and labels."""

from __future__ import annotations

import math
from collections.abc import Iterator

import httpx
from prometheus_client.parser import text_string_to_metric_families

Labels = frozenset[tuple[str, str]]


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


def scrape(url: str, timeout: float = 30.0) -> Metrics:
    """GET ``url`` + ``/metrics`` and parse it."""
    response = httpx.get(url.rstrip("/") + "/metrics", timeout=timeout)
    response.raise_for_status()
    return parse(response.text)
