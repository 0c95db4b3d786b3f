"""The report's figures, as PNG data URIs (matplotlib, Agg): sized to the page's width at 1300 px, legends
beside the axes, a log axis where a few values dwarf the rest (the axis label says so).

Every label from a file is plain text (TEXT_ONLY): `$...$` in it is never parsed as mathtext.
"""

from __future__ import annotations

import base64
import io
import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402
import numpy as np  # noqa: E402

#: Labels and names from files are text: `$...$` in them is not parsed as mathtext.
TEXT_ONLY = {"text.parse_math": False, "font.size": 11, "legend.fontsize": 10, "axes.formatter.useoffset": False}
PLAIN_TICKS = matplotlib.ticker.FuncFormatter(lambda value, _: f"{value:g}")
#: Figure width (inches at DPI): 1250 px, the page's width in a 1300 px window.
WIDTH, DPI = 12.5, 100
#: A series whose largest value is this many times its median is drawn on a log axis.
SKEW = 20.0
LOG_NOTE = "log scale: a few values are far above the rest"
CDF_KEYS = (("ttft_ms", "TTFT (ms)"), ("itl_ms", "ITL per chunk (ms)"), ("tpot_ms", "TPOT (ms)"),
            ("e2e_latency_ms", "E2E latency (ms)"))
SPLIT_PARTS = (("client_network", "outside server timing", "#8da0cb"), ("queue", "server queue", "#fc8d62"),
               ("prefill", "server prefill", "#66c2a5"), ("server_other", "server other", "#b3b3b3"),
               ("decode", "server decode (--no-stream: TTFT is the whole response)", "#e78ac3"))
#: The server plot's panels: (series keys and line styles, y label).
SERVER_PANELS = (((("running", "-"), ("waiting", "--")), "server requests"), ((("kv_usage", "-"),), "KV-cache use"))


def figure(rows: int, height: float, cols: int = 1):
    """A page-wide figure of `rows` x `cols` axes, laid out with room for legends beside them."""
    fig, axes = plt.subplots(rows, cols, figsize=(WIDTH, height), layout="constrained", squeeze=False)
    return fig, list(axes.flat)


def png(fig) -> str:
    """`fig` as a PNG data URI; the figure is closed."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def num(value) -> float:
    """A number from a file as a float; NaN for anything else."""
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else math.nan


def log_x(ax, axis: str = "x") -> None:
    """A log `axis` labelled in plain numbers: its own labels are mathtext, which TEXT_ONLY turns
    off (they would show as `$\\mathdefault{10^{1}}$`)."""
    which = ax.xaxis if axis == "x" else ax.yaxis
    (ax.set_xscale if axis == "x" else ax.set_yscale)("log")
    which.set_major_formatter(PLAIN_TICKS)
    which.set_minor_formatter(_minor_ticks(ax, axis))


def _minor_ticks(ax, axis: str) -> matplotlib.ticker.Formatter:
    """Plain labels on a log axis's minor ticks: all of them while it spans less than a decade, 2 and
    5 of each decade while it spans less than two (else none), so that labels never collide."""
    def label(value, _) -> str:
        low, high = ax.get_xlim() if axis == "x" else ax.get_ylim()
        mantissa = round(value / 10 ** math.floor(math.log10(value)), 6)
        return f"{value:g}" if high < 10 * low or (high < 100 * low and mantissa in (2, 5)) else ""
    return matplotlib.ticker.FuncFormatter(label)


def is_skewed(values) -> bool:
    """True when `values` are all positive and their largest is SKEW times their median or more."""
    arr = np.asarray([v for v in values if not math.isnan(v)], dtype=np.float64)
    return bool(arr.size and arr.min() > 0 and arr.max() >= SKEW * np.median(arr))


def legend(ax) -> None:
    """The axes' legend beside it, on the right, so that it covers no line or bar."""
    ax.grid(alpha=0.3)
    if ax.lines or ax.containers:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)


def steady_span(ax, tl: dict, color) -> None:
    """The run's steady-state window, shaded in its colour."""
    ss = tl.get("steady_state")
    if isinstance(ss, dict) and ss.get("start_s") is not None and ss.get("end_s") is not None:
        ax.axvspan(ss["start_s"], ss["end_s"], color=color, alpha=0.12, lw=0)
        for edge in (ss["start_s"], ss["end_s"]):
            ax.axvline(edge, color=color, ls=":", lw=1)


def bucket_series(tl: dict, key: str, sub: str | None = None) -> tuple[list[float], list[float]]:
    """(interval middles, values): each bucket covers [t_s, t_s + interval_s)."""
    half = num(tl.get("interval_s")) / 2
    xs, ys = [], []
    for b in tl["buckets"]:
        value = b.get(key)
        if sub is not None:
            value = value.get(sub) if isinstance(value, dict) else None
        xs.append(num(b.get("t_s")) + (0.0 if math.isnan(half) else half))
        ys.append(num(value))
    return xs, ys


def throughput_plot(timed) -> str:
    """Output tok/s and requests in flight per interval, each run's steady state shaded."""
    fig, (top, bottom) = figure(2, 6.0)
    for tl, label, color in timed:
        top.plot(*bucket_series(tl, "output_tok_s"), color=color, marker=".", label=label)
        bottom.plot(*bucket_series(tl, "in_flight"), color=color, marker=".", label=label)
        for ax in (top, bottom):
            steady_span(ax, tl, color)
    top.set_ylabel("output tok/s")
    bottom.set_ylabel("requests in flight")
    bottom.set_xlabel("time since the first intended send (s), per interval; shaded: steady state")
    top.sharex(bottom)
    for ax in (top, bottom):
        ax.set_ylim(bottom=0)  # NOTE: from 0, so that a 2% wobble does not fill the panel
        legend(ax)
    return png(fig)


def latency_plot(timed) -> tuple[str, list[str]]:
    """TTFT and ITL p50 / p99 per interval, and a note per panel drawn on a log axis (where a few
    values dwarf the rest: one 40 s gap would flatten every other point onto the axis)."""
    fig, axes = figure(2, 6.0)
    notes = []
    for ax, key, name in ((axes[0], "ttft_ms", "TTFT (ms)"), (axes[1], "itl_ms", "ITL per chunk (ms)")):
        values = []
        for tl, label, color in timed:
            for stat, style in (("p50", "-"), ("p99", "--")):
                xs, ys = bucket_series(tl, key, stat)
                ax.plot(xs, ys, color=color, ls=style, marker=".", label=f"{label} {stat}")
                values += ys
            steady_span(ax, tl, color)
        if is_skewed(values):
            log_x(ax, "y")
            notes.append(f"{name}: {LOG_NOTE} (largest {max(v for v in values if not math.isnan(v)):g} ms)")
            name += "\n(log scale)"
        ax.set_ylabel(name)
        legend(ax)
    axes[0].sharex(axes[1])
    axes[1].set_xlabel("time since the first intended send (s); solid p50, dashed p99")
    return png(fig), notes


def cdf_plot(cdfs) -> str:
    """The four latency CDFs (cdf_figure) as a PNG."""
    return png(cdf_figure(cdfs))


def cdf_figure(cdfs):
    """The four latency CDFs; an axis spanning a decade or more is logarithmic."""
    fig, axes = figure(2, 7.0, cols=2)
    for ax, (key, name) in zip(axes, CDF_KEYS, strict=True):
        for cdf, label, color in cdfs:
            points = [p for p in cdf.get(key) or [] if isinstance(p, list | tuple) and len(p) == 2
                      and isinstance(p[1], int | float)]
            if points:
                ax.plot([v for _, v in points], [q / 100 for q, _ in points], color=color, label=label)
        xs = [x for line in ax.lines for x in line.get_xdata()]
        if xs and min(xs) > 0 and max(xs) >= 10 * min(xs):
            log_x(ax)
            name += " (log scale)"
        ax.xaxis.set_major_locator(_cdf_locator(ax))
        ax.set_xlabel(name)
        ax.set_ylabel("fraction of samples")
        ax.grid(alpha=0.3)
    if axes[0].lines:
        fig.legend(handles=axes[0].lines, loc="outside upper center", ncol=min(4, len(axes[0].lines)))
    return fig


def _cdf_locator(ax) -> matplotlib.ticker.Locator:
    """At most 6 major ticks on a linear axis (its labels can be 6 digits wide at half the page)."""
    if ax.get_xscale() == "log":
        return ax.xaxis.get_major_locator()
    return matplotlib.ticker.MaxNLocator(nbins=6)


def server_plot(server) -> tuple[str | None, list[str]]:
    """Running / waiting requests and KV-cache use over time, from the runs' scrapes; a panel whose
    values are all zero in every run is left out and named in the notes."""
    panels, notes = [], []
    for keys, name in SERVER_PANELS:
        values = [v for series, _, _ in server for key, _ in keys for v in series.get(key) or []
                  if isinstance(v, int | float)]
        if any(values):
            panels.append((keys, name))
        else:
            notes.append(f"{name} ({', '.join(k for k, _ in keys)}): 0 in every scrape of every run, not drawn")
    if not panels:
        return None, notes
    fig, axes = figure(len(panels), 3.0 * len(panels))
    for ax, (keys, name) in zip(axes, panels, strict=True):
        for series, label, color in server:
            t = [num(v) for v in series["t_s"]]
            for key, style in keys:
                values = series.get(key)
                if values and len(values) == len(t):
                    ax.plot(t, [num(v) for v in values], color=color, ls=style, marker=".", label=f"{label} {key}")
        ax.set_ylabel(name)
        legend(ax)
    for ax in axes[:-1]:
        ax.sharex(axes[-1])
    axes[-1].set_xlabel("time since the first intended send (s), per scrape; solid running, dashed waiting")
    return png(fig), notes


def split_plot(splits) -> str:
    """Each run's mean TTFT as stacked bars by where it was spent; the legend beside the bars."""
    fig, (ax,) = figure(1, 1.6 + 0.6 * len(splits))
    names = [label for _, label in splits]
    left = [0.0] * len(splits)
    for key, name, color in SPLIT_PARTS:
        widths = [num((split.get("mean_ms") or {}).get(key)) for split, _ in splits]
        widths = [0.0 if math.isnan(w) else w for w in widths]
        ax.barh(names, widths, left=left, color=color, label=name)
        left = [a + b for a, b in zip(left, widths, strict=True)]
    ax.invert_yaxis()
    ax.set_xlabel("mean TTFT (ms), split by where it was spent")
    legend(ax)
    ax.grid(alpha=0.3, axis="y")
    return png(fig)
