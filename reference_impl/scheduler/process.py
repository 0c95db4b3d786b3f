"""The scheduler process: receive → schedule → run → hand off to the detokenizer."""

from __future__ import annotations

from collections.abc import Callable

import zmq

from reference_impl import ipc
from reference_impl.config import ServerArgs
from reference_impl.engine import make_clock, make_engine
from reference_impl.hot_paths import HOT_PATHS
from reference_impl.messages import AbortReq, GetStatsReq, TokenizedGenerateReq, ToScheduler
from reference_impl.scheduler.dp_group import DPGroup
from reference_impl.scheduler.scheduler import Scheduler
from reference_impl.tokenizer import get_tokenizer

_IDLE_POLL_MS = 1000


def build_scheduler(args: ServerArgs) -> Scheduler | DPGroup:
    """A scheduler with the engine, tokenizer, token storage and clock the args name.

    With ``--enable-dp-attention``: a ``DPGroup`` of ``--dp-size`` lockstep ranks, all held
    by this one process.
    """
    tokenizer = get_tokenizer(args.tokenizer_path)
    storage = HOT_PATHS["H4"].create(args.token_storage)
    clock = make_clock(args.sim_time)
    if args.enable_dp_attention:
        return DPGroup(args, tokenizer, storage, clock)
    engine = make_engine(args, tokenizer, storage, clock)
    return Scheduler(args, engine, tokenizer, storage, clock)


def run(args: ServerArgs, ready: Callable[[], None]) -> None:
    """Serve until killed."""
    scheduler = build_scheduler(args)
    ctx = zmq.Context()
    inbox = ipc.PullQueue(ctx, ipc.endpoint(args.ipc_dir, ipc.SCHEDULER_IN), ToScheduler)
    to_detokenizer = ipc.PushQueue(ctx, ipc.endpoint(args.ipc_dir, ipc.DETOKENIZER_IN))
    ready()
    while True:
        _receive(scheduler, inbox, to_detokenizer)
        output = scheduler.step()
        if output is not None:
            to_detokenizer.put(output)


def _receive(scheduler: Scheduler | DPGroup, inbox: ipc.PullQueue, outbox: ipc.PushQueue) -> None:
    msg = inbox.get(_IDLE_POLL_MS) if scheduler.is_idle else inbox.get_nowait()
    while msg is not None:
        if isinstance(msg, TokenizedGenerateReq):
            scheduler.add_request(msg)
        elif isinstance(msg, AbortReq):
            scheduler.abort(msg.rid)
        elif isinstance(msg, GetStatsReq):
            outbox.put(scheduler.stats(msg.request_id))
        msg = inbox.get_nowait()
