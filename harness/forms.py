"""Server forms and regimes: the flags that put the reference server in a form, named once.

A form's flags come from the hot-path registry (``reference_impl.hot_paths``), so a form name
here can never disagree with the server's own ``--all-legacy`` or a hot path's legacy choice.
"""

from __future__ import annotations

from dataclasses import dataclass

from reference_impl.hot_paths import HOT_PATHS, only_legacy_flags

#: Engine settings the experiments run in (sim engine latency profiles, PD decode node).
REGIMES: dict[str, tuple[str, ...]] = {
    "pd-decode": ("--disaggregation-mode", "decode", "--sim-profile", "pd-decode-fast"),
    "pd-decode-h100": ("--disaggregation-mode", "decode", "--sim-profile", "pd-decode-h100"),
    "h100-llama-8b": ("--sim-profile", "h100-llama-8b"),
}
#: How the HTTP process receives from the detokenizer: upstream's two IPC paths (SPEC, H1).
IPC_RECV = ("yield", "no-yield")


@dataclass(frozen=True)
class Form:
    """A named server form: the flags that select it."""

    name: str
    flags: tuple[str, ...] = ()

    def under(self, ipc_recv: str) -> Form:
        """This form with ``--ipc-recv``; the name gains a suffix unless it is the default."""
        if ipc_recv not in IPC_RECV:
            raise ValueError(f"ipc_recv must be one of {IPC_RECV}, got {ipc_recv!r}")
        suffix = "" if ipc_recv == IPC_RECV[0] else f"-{ipc_recv}"
        return Form(self.name + suffix, (*self.flags, "--ipc-recv", ipc_recv))


def all_legacy() -> Form:
    """Every hot path in its legacy form."""
    return Form("all-legacy", ("--all-legacy",))


def all_optimized() -> Form:
    """The server's defaults: every hot path optimized."""
    return Form("all-optimized")


def only_legacy(hot_path: str) -> Form:
    """One hot path in its legacy form, the others optimized."""
    return Form(f"{hot_path}-legacy-only", only_legacy_flags(hot_path))


def by_name(name: str) -> Form:
    """``all-legacy``, ``all-optimized`` or ``H<n>-legacy-only``; an unknown name is an error."""
    if name == "all-legacy":
        return all_legacy()
    if name == "all-optimized":
        return all_optimized()
    hot_path = name.removesuffix("-legacy-only").upper()
    if name.endswith("-legacy-only") and hot_path in HOT_PATHS:
        return only_legacy(hot_path)
    raise ValueError(f"unknown form {name!r}; choose from {', '.join(FORM_NAMES)}")


FORM_NAMES = ("all-legacy", "all-optimized", *(f"{h}-legacy-only" for h in HOT_PATHS))
#: The storm's forms: H1 (wake-ups) and H2 (SSE encoding) toggled alone, upstream's pair.
STORM_FORMS = ("all-legacy", "all-optimized", "H1-legacy-only", "H2-legacy-only")
