"""Server configurations per hot path and form, and the objects of one form.

``optimized`` is the stack's default for that hot path (``ServerArgs()``), so a commit that
switches a default back to its legacy form shows up as a slowdown of the optimized benchmarks.
Both go through the hot-path registry; on commits older than the registry they fall back to
the factories of that time, so asv keeps the history.
"""

from __future__ import annotations

import dataclasses
import importlib

from benchmarks.common import history_safe

# NOTE: the factories before the registry (reference_impl.hot_paths), for asv's older commits.
_OLD_FACTORIES = {"H2": "reference_impl.server.sse:get_chat_chunk_encoder",
                  "H4": "reference_impl.scheduler.token_storage:get_token_storage"}


def form_args(hot_path: str, form: str, **overrides):
    """``ServerArgs`` with hot path ``hot_path`` ("H1".."H6") in ``form`` ("legacy"/"optimized")."""
    if form not in ("legacy", "optimized"):
        raise ValueError(f"form must be 'legacy' or 'optimized', got {form!r}")
    with history_safe():
        from reference_impl.config import ServerArgs

        args = ServerArgs(**overrides)
        if form == "legacy":
            field, value = _legacy_value(hot_path)
            args = dataclasses.replace(args, **{field: value})
        return args


def create_form(hot_path: str, name: str, *args):
    """A new object of ``hot_path``'s form ``name``."""
    with history_safe():
        try:
            from reference_impl.hot_paths import HOT_PATHS
        except ImportError:
            module, _, factory = _OLD_FACTORIES[hot_path].partition(":")
            return getattr(importlib.import_module(module), factory)(name, *args)
        return HOT_PATHS[hot_path].create(name, *args)


def _legacy_value(hot_path: str) -> tuple[str, object]:
    try:
        from reference_impl.hot_paths import HOT_PATHS
    except ImportError:
        from reference_impl.config import HOT_PATHS as OLD

        hp = next(h for h in OLD if h.id == hot_path)
        return hp.field, hp.legacy
    hp = HOT_PATHS[hot_path]
    return hp.field, hp.value(hp.legacy)
