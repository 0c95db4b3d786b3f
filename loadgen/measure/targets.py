"""Several Prometheus targets scraped as one (`--server-metrics-url`, repeatable): the server's
and, say, a dcgm-exporter's beside it, and what their figures give together (energy per token).
"""

from __future__ import annotations

from loadgen.measure.all_series import cap_note
from loadgen.measure.server_metrics import Scraper
from loadgen.plan.config import DEFAULT_MAX_SERIES


class Scrapers:
    """One Scraper per target, run as one: the first target's block is `server_metrics`, each
    further target's is in its `others` list."""

    def __init__(self, urls: tuple[str, ...], interval_s: float = 1.0, headers: dict | None = None,
                 verify: bool = True, max_series: int = DEFAULT_MAX_SERIES) -> None:
        self.scrapers = [Scraper(url, interval_s, headers, verify, max_series) for url in urls]

    def start(self) -> list[str]:
        """Each target's baseline scrape: its status ('ok' or 'unavailable: why')."""
        return [scraper.start() for scraper in self.scrapers]

    def begin(self) -> None:
        """Start every target's thread (after the workers are forked)."""
        for scraper in self.scrapers:
            scraper.begin()

    def rebase(self) -> None:
        """A new baseline of every target once the warm-up is done."""
        for scraper in self.scrapers:
            scraper.rebase()

    def latest(self) -> dict | None:
        """The first target's newest series (for the live view)."""
        return self.scrapers[0].latest()

    @property
    def is_interrupted(self) -> bool:
        """Whether a Ctrl-C came during stop()."""
        return any(scraper.is_interrupted for scraper in self.scrapers)

    def stop(self, t0_ns: int) -> dict:
        """Every thread halted at once, then each target's last scrape: the first's block with the
        others' blocks in `others` (after a Ctrl-C the rest keep what they had, without a last scrape)."""
        for scraper in self.scrapers:
            scraper.halt()
        blocks = [scraper.stop(t0_ns, not self.is_interrupted) for scraper in self.scrapers]
        first = blocks[0]
        if len(blocks) > 1:
            first["others"] = blocks[1:]
        return first


def targets(block: dict) -> list[dict]:
    """Every target's block in a `server_metrics` block: itself, then its `others`."""
    return [block, *block.get("others", ())]


def energy_per_token(block: dict, summary: dict) -> dict | None:
    """The GPUs' energy over the run (dcgm-exporter targets' energy counters) per output token the
    client received, with their mean utilisation, power and most memory used; None without one."""
    runs = [t["run"] for t in targets(block) if t.get("dialect") == "dcgm" and t.get("run")]
    energy = [r["energy_j"] for r in runs if r.get("energy_j") is not None]
    if not runs:
        return None
    tokens = summary.get("total_output_tokens")
    total = sum(energy) if energy else None
    out = {"energy_j": total,
           "energy_per_output_token_j": total / tokens if total is not None and tokens else None,
           "mean_gpu_util_pct": _mean(r.get("mean_gpu_util") for r in runs),
           "mean_power_w": _sum(r.get("mean_power_w") for r in runs),
           "max_memory_used_mib": _sum(r.get("max_memory_used_mib") for r in runs)}
    return out


def _mean(values) -> float | None:
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def _sum(values) -> float | None:
    values = [v for v in values if v is not None]
    return sum(values) if values else None


def figure_lines(block: dict, summary: dict) -> list[tuple[str, str]]:
    """(label, text) rows of every target's mapped figures, series kept and cap, and the energy per
    output token: what the terminal table and the HTML report show under the server's metrics."""
    rows = []
    for i, target in enumerate(targets(block or {})):
        if i:
            rows.append((f"server metrics {i + 1}", f"{target.get('url')}: " + _status(target)))
        if target.get("status") != "ok":
            continue
        rows += [(f"  {label}", text) for label, text in _run_figures(target.get("run") or {})]
        every = target.get("all_series") or {}
        if every:
            rows.append(("  series kept", f"{every['num_series']:,} (cap {every['max_series']:,})"))
        if (note := cap_note(target)) is not None:
            rows.append(("  series cap", note))
    energy = summary.get("energy") or {}
    if energy.get("energy_per_output_token_j") is not None:
        rows.append(("energy per output token", f"{energy['energy_per_output_token_j']:,.4f} J "
                     f"({energy['energy_j']:,.1f} J over {summary.get('total_output_tokens', 0):,} tokens)"))
    return rows


def _status(target: dict) -> str:
    if target.get("status") != "ok":
        return target.get("status", "off")
    failed = target.get("failed_scrapes") or 0
    return (f"{target.get('dialect') or 'no known names'}, {target.get('scrapes', 0):,} scrapes"
            + (f", {failed:,} failed (last: {target.get('last_failure')})" if failed else ""))


#: `run` key -> its row's label and format (a fraction as a percentage).
_FIGURES = {
    "prefix_cache_hit_rate": ("prefix-cache hit rate", "{:.1%}"),
    "spec_acceptance_rate": ("spec-decode acceptance", "{:.1%}"),
    "mean_cache_hit_rate": ("cache hit rate (mean)", "{:.1%}"),
    "mean_spec_accept_length": ("spec accept length (mean)", "{:,.2f}"),
    "mean_gpu_util": ("GPU utilisation (mean, %)", "{:,.1f}"),
    "max_memory_used_mib": ("GPU memory used (max, MiB)", "{:,.0f}"),
    "mean_power_w": ("GPU power (mean, W)", "{:,.1f}"),
    "energy_j": ("GPU energy (J)", "{:,.1f}"),
}


def _run_figures(run: dict) -> list[tuple[str, str]]:
    return [(label, spec.format(run[key])) for key, (label, spec) in _FIGURES.items() if run.get(key) is not None]
