"""Mean and spread of a few repeats (a 95% Student-t interval from 3 up, the min and max of 2), and
the rule that calls two of them different."""

from __future__ import annotations

import math

# NOTE: two-sided 95% Student-t quantiles t(0.975, df) for df 1..30 (no scipy in the dependencies);
# above 30 the Cornish-Fisher expansion below is within 1e-4 of the exact value.
_T975 = (12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.4469, 2.3646, 2.3060, 2.2622, 2.2281,
         2.2010, 2.1788, 2.1604, 2.1448, 2.1314, 2.1199, 2.1098, 2.1009, 2.0930, 2.0860,
         2.0796, 2.0739, 2.0687, 2.0639, 2.0595, 2.0555, 2.0518, 2.0484, 2.0452, 2.0423)
_Z975 = 1.959964


def t975(df: int) -> float:
    """The 97.5% quantile of Student's t with `df` degrees of freedom (df >= 1)."""
    if df < 1:
        raise ValueError("df must be >= 1")
    if df <= len(_T975):
        return _T975[df - 1]
    z = _Z975
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


#: Repeats from which a figure gets a Student-t interval. With 2, t(0.975, 1) = 12.7 makes the
#: interval 12.7 times as wide as the distance between the two values (`82.1 ± 398.3` from two
#: runs 63 ms apart), so 2 repeats give their min and max instead, said as such.
MIN_T_REPEATS = 3
T95, MIN_MAX = "t95", "min-max"


def interval(values: list[float | None]) -> dict | None:
    """`{n, mean, std, low, high, kind}` of the non-None values. kind T95 (n >= MIN_T_REPEATS):
    mean ± t(0.975, n-1)·s/√n (sample std s); MIN_MAX (n = 2): the two values; None (n = 1): low
    = high = None (no spread to judge). No values give None."""
    xs = [float(v) for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
    if not xs:
        return None
    n = len(xs)
    mean = sum(xs) / n
    if n == 1:
        return {"n": 1, "mean": mean, "std": None, "low": None, "high": None, "kind": None}
    std = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1))
    if n < MIN_T_REPEATS:
        return {"n": n, "mean": mean, "std": std, "low": min(xs), "high": max(xs), "kind": MIN_MAX}
    half = t975(n - 1) * std / math.sqrt(n)
    return {"n": n, "mean": mean, "std": std, "low": mean - half, "high": mean + half, "kind": T95}


def interval_kind(stat: dict | None) -> str | None:
    """T95, MIN_MAX or None; a file from before `kind` holds t-intervals wherever low is set."""
    if not stat or stat.get("low") is None:
        return None
    return stat.get("kind", T95)


def significant(a: dict | None, b: dict | None) -> bool | None:
    """True when the two 95% t-intervals do not overlap; None unless both are t-intervals (3+ repeats:
    two min-max ranges of 2 repeats each miss each other by chance one time in three)."""
    if interval_kind(a) != T95 or interval_kind(b) != T95:
        return None
    return a["high"] < b["low"] or b["high"] < a["low"]
