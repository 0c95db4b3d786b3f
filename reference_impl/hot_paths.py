"""The hot-path registry: H1-H6, each registered once with its interface, forms and flag.

Every form is a name mapped to its implementation, written ``"module:Class"`` and imported on
first use, so the config and the CLI import nothing heavy. The registry feeds ``ServerArgs``'
validation, the argparse choices and help, ``--all-legacy``, the ready line, and the experiment
harness's forms (``only_legacy_flags``); a name it does not know is a ``ValueError`` naming the
choices. Creating a form's object always goes through ``HOT_PATHS[id].create(form, ...)``
(``implementation`` where one instance is made per response), in either output mode:
``incremental=True`` picks the class registered for ``--incremental-streaming-output`` (H3 and
H6 have one; the others ignore the mode).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

QUEUE_TRIGGER_RATIO = "0.1"
"""Upstream's default ``--prefill-delayer-queue-min-ratio``, used to select H5's optimized form."""


@dataclass(frozen=True)
class HotPath:
    """One hot path: the config field (and flag) that selects its form, and its forms."""

    id: str
    field: str
    upstream: str
    interface: str
    forms: Mapping[str, str]
    legacy: str
    optimized: str
    help: str = ""
    incremental_forms: Mapping[str, str] = field(default_factory=dict)
    """Form name -> implementation under ``--incremental-streaming-output``, where it differs."""

    @property
    def flag(self) -> str:
        return "--" + self.field.replace("_", "-")

    @property
    def cli_help(self) -> str:
        """The help of ``flag``: the hot path's id and upstream change, then ``help``."""
        return f"[{self.id}, {self.upstream}] {self.help}"

    @property
    def choices(self) -> tuple[str, ...]:
        return tuple(self.forms)

    def check(self, form: str) -> str:
        """``form`` itself, or a ValueError naming the valid forms."""
        if form not in self.forms:
            raise ValueError(f"{self.id} ({self.flag}): unknown form {form!r}; choose from "
                             f"{', '.join(self.forms)}")
        return form

    def value(self, form: str) -> Any:
        """The config value that selects ``form``."""
        return self.check(form)

    def form_of(self, value: Any) -> str:
        """The form a config value selects."""
        return self.check(value)

    def server_flags(self, form: str) -> tuple[str, ...]:
        """The server flags that select ``form``."""
        return (self.flag, self.check(form))

    def implementation(self, form: str, *, incremental: bool = False) -> type:
        """The class of ``form`` (in the incremental output mode if ``incremental``), imported now."""
        spec = self.forms[self.check(form)]
        if incremental:
            spec = self.incremental_forms.get(form, spec)
        module, _, name = spec.partition(":")
        return getattr(importlib.import_module(module), name)

    def interface_class(self) -> type:
        module, _, name = self.interface.partition(":")
        return getattr(importlib.import_module(module), name)

    def create(self, form: str, *args: Any, incremental: bool = False, **kwargs: Any) -> Any:
        """A new object of ``form``, built with the arguments every form of this hot path takes."""
        return self.implementation(form, incremental=incremental)(*args, **kwargs)


@dataclass(frozen=True)
class RatioHotPath(HotPath):
    """A hot path whose optimized form is switched on by setting a ratio (H5's queue trigger)."""

    enabling_flags: tuple[str, ...] = ()

    def value(self, form: str) -> Any:
        return None if self.check(form) == self.legacy else float(QUEUE_TRIGGER_RATIO)

    def form_of(self, value: Any) -> str:
        return self.legacy if value is None else self.optimized

    def server_flags(self, form: str) -> tuple[str, ...]:
        if self.check(form) == self.legacy:
            return ()
        return (*self.enabling_flags, self.flag, QUEUE_TRIGGER_RATIO)


def _forms(module: str, **forms: str) -> dict[str, str]:
    return {name.replace("_", "-"): f"reference_impl.{module}:{cls}" for name, cls in forms.items()}


HOT_PATHS: dict[str, HotPath] = {hp.id: hp for hp in (
    HotPath("H1", "wakeup", "sglang#22658 batch notify", "reference_impl.server.wakeups:Wakeups",
            _forms("server.wakeups", immediate="ImmediateWakeups", batched="BatchedWakeups"),
            legacy="immediate", optimized="batched",
            help="'immediate' sets every waiting stream's event at once (legacy); 'batched' sets "
                 "events in groups of --batch-notify-size and yields between groups."),
    HotPath("H2", "sse_encoder", "sglang#22658 SSE fast path", "reference_impl.server.sse:ChatChunkEncoder",
            _forms("server.sse", pydantic="PydanticChatChunkEncoder", msgspec="MsgspecChatChunkEncoder"),
            legacy="pydantic", optimized="msgspec",
            help="SSE chat chunks via 'pydantic' models (legacy) or 'msgspec' Structs."),
    HotPath("H3", "stream_output", "sglang#22567 no O(n^2) copy",
            "reference_impl.server.stream_outputs:StreamOutputs",
            _forms("server.stream_outputs", copy="CopyOutputs", reference="TailOutputs",
                   reference_full="FullTextOutputs"),
            legacy="copy", optimized="reference",
            help="Non-incremental streaming: 'copy' queues a copy of all ids and text per step "
                 "(legacy); 'reference-full' queues a reference and builds the whole text once "
                 "per wake-up (upstream exactly); 'reference' (default, past upstream) hands the "
                 "consumer only the text added since its last wake-up.",
            incremental_forms=_forms("server.stream_outputs", copy="IncrementalOutputs",
                                     reference="IncrementalOutputs",
                                     reference_full="IncrementalOutputs")),
    HotPath("H4", "token_storage", "sglang#25098 array('q') token ids",
            "reference_impl.scheduler.token_storage:TokenStorage",
            _forms("scheduler.token_storage", list="ListTokenStorage", array="ArrayTokenStorage"),
            legacy="list", optimized="array",
            help="Request token ids as 'list' (legacy) or array('q')."),
    RatioHotPath("H5", "prefill_delayer_queue_min_ratio", "sglang#23189 queue trigger",
                 "reference_impl.scheduler.prefill_delayer:QueueTrigger",
                 _forms("scheduler.prefill_delayer", slot_only="SlotOnly", queue_trigger="QueueMinRatio"),
                 legacy="slot-only", optimized="queue-trigger",
                 help="Enables the queue trigger (unset: slot condition only, the legacy form).",
                 enabling_flags=("--enable-prefill-delayer",)),
    HotPath("H6", "stream_delta", "sglang#22606 integer offsets", "reference_impl.server.deltas:DeltaTracker",
            _forms("server.deltas", concat="ConcatDeltaTracker", offset="OffsetDeltaTracker"),
            legacy="concat", optimized="offset",
            help="Stream deltas by 'concat' string buffers (legacy) or integer 'offset'.",
            incremental_forms=_forms("server.deltas", concat="IncrementalConcatDeltaTracker",
                                     offset="IncrementalOffsetDeltaTracker")),
)}


def get(hot_path: str) -> HotPath:
    """The hot path named ``hot_path`` (``"H1"`` .. ``"H6"``); a ValueError for any other name."""
    try:
        return HOT_PATHS[hot_path]
    except KeyError:
        raise ValueError(f"unknown hot path {hot_path!r}; choose from {', '.join(HOT_PATHS)}") from None


def only_legacy_flags(hot_path: str) -> tuple[str, ...]:
    """Server flags that put one hot path in its legacy form, the others staying as they are."""
    hp = get(hot_path)
    return hp.server_flags(hp.legacy)


def all_legacy_flags() -> tuple[str, ...]:
    """Server flags equivalent to ``--all-legacy``."""
    return tuple(flag for hp in HOT_PATHS.values() for flag in hp.server_flags(hp.legacy))
