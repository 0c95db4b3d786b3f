"""Server configurations per hot path and form.

``optimized`` is the stack's default for that hot path (``ServerArgs()``), so a commit that
switches a default back to its legacy form shows up as a slowdown of the optimized benchmarks.
"""

from __future__ import annotations

import dataclasses

from benchmarks.common import history_safe


def form_args(hot_path: str, form: str, **overrides):
    """``ServerArgs`` with hot path ``hot_path`` ("H1".."H6") in ``form`` ("legacy"/"optimized")."""
    with history_safe():
        from reference_impl.config import HOT_PATHS, ServerArgs

        args = ServerArgs(**overrides)
        if form == "legacy":
            hp = next(h for h in HOT_PATHS if h.id == hot_path)
            args = dataclasses.replace(args, **{hp.field: hp.legacy})
        elif form != "optimized":
            raise ValueError(f"form must be 'legacy' or 'optimized', got {form!r}")
        return args
