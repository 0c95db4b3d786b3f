"""The HTTP process's two IPC receive regimes (``--ipc-recv``), as upstream SGLang's.

``yield`` (upstream's default pickle IPC): each message reaches the receive loop through a
chained future, so the event loop turns once per engine step and a stream woken by immediate
wake-ups finds one output queued. ``no-yield`` (upstream with ``SGLANG_USE_PICKLE_IPC=0``):
a ready receive resolves at once, so a backlog is drained without yielding and the stream's
first wake-up finds every output queued. Real zmq sockets, the real receive loop and tokenizer
manager; ``inproc`` transport, on which a sent message is queued at the receiver once ``send``
returns, so the backlog is known exactly before the loop starts (the regimes live in the
receiving socket's futures, the same for every transport).
"""

from __future__ import annotations

import asyncio
import time

import pytest
import uvloop
import zmq
import zmq.asyncio

from reference_impl import ipc
from reference_impl.config import IPC_RECV_MODES, ServerArgs
from reference_impl.messages import BatchStrOutput, ToTokenizerManager
from reference_impl.server.process import receive_loop
from reference_impl.server.stream_outputs import ReqState
from reference_impl.server.tokenizer_manager import TokenizerManager

NUM_STEPS = 12


def _step(i: int) -> BatchStrOutput:
    return BatchStrOutput(rids=["r0"], texts=[f"{i},"], new_token_ids=[[i]], finish_reasons=[None],
                          prompt_tokens=[1], completion_tokens=[i + 1])


def _queued_at_once(inbox: ipc.AsyncPullQueue) -> int:
    """Messages a raw receive on the inbox's socket gets without waiting (they are consumed)."""
    sock = zmq.Socket.shadow(inbox._sock.underlying)
    count = 0
    while sock.poll(0):
        sock.recv(zmq.NOBLOCK)
        count += 1
    return count


async def _outputs_per_wake_up(ipc_recv: str) -> list[int]:
    """How many outputs a stream woken by immediate wake-ups finds queued at each wake-up."""
    sync_ctx = zmq.Context()
    address = f"inproc://inbox-{ipc_recv}"
    inbox = ipc.ASYNC_PULL_QUEUES[ipc_recv](zmq.asyncio.Context.shadow(sync_ctx.underlying),
                                            address, ToTokenizerManager)
    push = ipc.PushQueue(sync_ctx, address)
    tm = TokenizerManager(ServerArgs(wakeup="immediate", ipc_recv=ipc_recv), lambda msg: None)
    state = ReqState("r0", 0, asyncio.Event(), time.perf_counter())
    tm.rid_to_state["r0"] = state

    async def consume() -> list[int]:
        seen = []
        while sum(seen) < NUM_STEPS:
            await state.event.wait()
            state.event.clear()
            seen.append(len(state.out_list))
            state.out_list = []
        return seen

    consumer = asyncio.create_task(consume())
    await asyncio.sleep(0)  # the stream waits on its event before any step arrives
    for i in range(NUM_STEPS):
        push.put(_step(i))
    loop_task = asyncio.create_task(receive_loop(tm, inbox))
    try:
        return await asyncio.wait_for(consumer, 30)
    finally:
        loop_task.cancel()
        push.close()
        inbox.close()
        sync_ctx.destroy(linger=0)


def test_the_backlog_is_queued_when_sent():
    """The premise of the regime test: on inproc every sent step is queued at once."""
    sync_ctx = zmq.Context()
    inbox = ipc.AsyncPullQueue(zmq.asyncio.Context.shadow(sync_ctx.underlying), "inproc://premise",
                               ToTokenizerManager)
    push = ipc.PushQueue(sync_ctx, "inproc://premise")
    for i in range(NUM_STEPS):
        push.put(_step(i))
    assert _queued_at_once(inbox) == NUM_STEPS
    push.close()
    inbox.close()
    sync_ctx.destroy(linger=0)


@pytest.mark.parametrize("ipc_recv, expected", [
    ("no-yield", [NUM_STEPS]),  # the whole backlog in one wake-up (one SSE chunk upstream)
    ("yield", [1] * NUM_STEPS),  # one engine step per wake-up
])
def test_a_woken_stream_sees_what_the_regime_leaves_queued(ipc_recv, expected):
    assert uvloop.run(_outputs_per_wake_up(ipc_recv)) == expected


def test_every_regime_has_an_inbox():
    assert set(ipc.ASYNC_PULL_QUEUES) == set(IPC_RECV_MODES)
    assert ServerArgs().ipc_recv == "yield"
