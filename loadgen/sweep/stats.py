"""Mean and 95% Student-t interval of a few repeats, and the rule that calls two of them different."""

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


def interval(values: list[float | None]) -> dict | None:
    """`{n, mean, std, low, high}` of the non-None values: mean ± t(0.975, n-1)·s/√n (sample std s).

    One value gives low = high = None (no spread to judge); none gives None."""
    xs = [float(v) for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
    if not xs:
        return None
    n = len(xs)
    mean = sum(xs) / n
    if n == 1:
        return {"n": 1, "mean": mean, "std": None, "low": None, "high": None}
    std = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1))
    half = t975(n - 1) * std / math.sqrt(n)
    return {"n": n, "mean": mean, "std": std, "low": mean - half, "high": mean + half}


def significant(a: dict | None, b: dict | None) -> bool | None:
    """True when the two 95% intervals do not overlap; None when either has no interval (n < 2)."""
    if not a or not b or a.get("low") is None or b.get("low") is None:
        return None
    return a["high"] < b["low"] or b["high"] < a["low"]
