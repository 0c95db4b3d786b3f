"""matplotlib plots for a report, each returned as a base64 PNG to inline in the page."""

from __future__ import annotations

import base64
import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from reportgen.analysis import QUANTILES, cost_by_length, loglog_slope  # noqa: E402

PROCESS_COLORS = {"http": "#d95f02", "scheduler": "#1b9e77", "detokenizer": "#7570b3"}


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def throughput(outcomes) -> str:
    """Output tokens/s per run, as bars."""
    fig, ax = plt.subplots(figsize=(7, 3.2))
    names = [o.run.name for o in outcomes]
    values = [o.result["output_throughput"] for o in outcomes]
    bars = ax.bar(names, values, color="#4c72b0")
    ax.bar_label(bars, fmt="%.0f", fontsize=8)
    ax.set_ylabel("output tokens/s")
    ax.set_title("Output throughput per form")
    ax.tick_params(axis="x", labelrotation=20, labelsize=8)
    return _png(fig)


def itl(outcomes) -> str:
    """The distribution (CDF) of per-chunk inter-token latency per run, log x."""
    fig, ax = plt.subplots(figsize=(7, 3.2))
    for o in outcomes:
        values = np.asarray(o.derived["itl_quantiles_ms"])
        if len(values):
            ax.plot(np.maximum(values, 1e-3), QUANTILES / 100, label=o.run.name)
    ax.set_xscale("log")
    ax.set_xlabel("inter-token latency per chunk (ms)")
    ax.set_ylabel("fraction of chunks")
    ax.set_title("ITL distribution (CDF)")
    ax.grid(alpha=0.3)
    if ax.lines:
        ax.legend(fontsize=8)
    return _png(fig)


def growth(outcomes) -> str:
    """HTTP-process CPU per request vs output length on log-log axes, with the fitted slope."""
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for form, points in cost_by_length(outcomes).items():
        xs, ys = np.array([p[0] for p in points]), np.array([p[1] for p in points])
        fit = loglog_slope(points)
        label = form + (f" (slope {fit[0]:.2f})" if fit else "")
        line = ax.plot(xs, ys, marker="o", label=label)[0]
        if fit:
            ax.plot(xs, 10 ** (fit[1] + fit[0] * np.log10(xs)), "--", color=line.get_color(), linewidth=1)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("output tokens per request")
    ax.set_ylabel("HTTP-process CPU ms per request")
    ax.set_title("Cost vs output length (dashed: least-squares fit in log-log)")
    ax.grid(alpha=0.3, which="both")
    if ax.lines:
        ax.legend(fontsize=8)
    return _png(fig)


def cpu(outcomes) -> str:
    """CPU seconds per server process per run, stacked."""
    fig, ax = plt.subplots(figsize=(7, 3.2))
    names = [o.run.name for o in outcomes]
    bottom = np.zeros(len(outcomes))
    for process, color in PROCESS_COLORS.items():
        values = np.array([o.cpu_s.get(process, 0.0) for o in outcomes])
        ax.bar(names, values, bottom=bottom, label=process, color=color)
        bottom += values
    ax.set_ylabel("CPU seconds during the load")
    ax.set_title("Server CPU per process")
    ax.legend(fontsize=8)
    ax.tick_params(axis="x", labelrotation=20, labelsize=8)
    return _png(fig)


def osl(outcomes) -> str:
    """Output tokens/s and prefill steps per (concurrency, range ratio, delayer) configuration."""
    fig, (ax_tput, ax_steps) = plt.subplots(1, 2, figsize=(11, 3.6))
    concurrencies = sorted({o.run.params["concurrency"] for o in outcomes})
    configs = sorted({(o.run.params["range_ratio"], o.run.params["delayer"]) for o in outcomes},
                     key=lambda c: (-c[0], c[1]))
    width = 0.8 / len(configs)
    for i, (ratio_value, delayer) in enumerate(configs):
        by_conc = {o.run.params["concurrency"]: o for o in outcomes
                   if (o.run.params["range_ratio"], o.run.params["delayer"]) == (ratio_value, delayer)}
        xs = np.arange(len(concurrencies)) + i * width
        label = f"ratio {ratio_value}, {delayer}"
        ax_tput.bar(xs, [by_conc[c].result["output_throughput"] for c in concurrencies], width,
                    label=label)
        ax_steps.bar(xs, [by_conc[c].metrics.get("num_prefill_steps", 0) for c in concurrencies],
                     width, label=label)
    for ax, title in ((ax_tput, "output tokens/s"), (ax_steps, "prefill steps")):
        ax.set_xticks(np.arange(len(concurrencies)) + 0.4 - width / 2)
        ax.set_xticklabels([f"conc {c}" for c in concurrencies])
        ax.set_title(title)
    ax_tput.legend(fontsize=7)
    return _png(fig)


PLOTS = {"throughput": throughput, "itl": itl, "growth": growth, "cpu": cpu, "osl": osl}
