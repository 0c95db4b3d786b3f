"""The HTTP process's receive loop gives the event loop a turn after every engine step.

An awaited zmq recv that is already ready does not yield, so without a turn per step a backlog
in the inbox held the event loop: socket events (a client's reset) waited until the backlog was
gone, 20-30 s on a busy machine. Real zmq IPC sockets, real tokenizer manager.
"""

from __future__ import annotations

import asyncio
import time

import zmq
import zmq.asyncio

from reference_impl import ipc
from reference_impl.config import ServerArgs
from reference_impl.messages import BatchStrOutput, ToTokenizerManager
from reference_impl.server.process import receive_loop
from reference_impl.server.stream_outputs import ReqState
from reference_impl.server.tokenizer_manager import TokenizerManager

NUM_STEPS = 200


def _step(i: int) -> BatchStrOutput:
    return BatchStrOutput(rids=["r0"], texts=[f"{i},"], new_token_ids=[[i]], finish_reasons=[None],
                          prompt_tokens=[1], completion_tokens=[i + 1])


async def _turns_while_draining(address: str) -> list[int]:
    """How many steps had been handled each time another task got a turn."""
    inbox = ipc.AsyncPullQueue(zmq.asyncio.Context(), address, ToTokenizerManager)
    push = ipc.PushQueue(zmq.Context(), address)
    tm = TokenizerManager(ServerArgs(), lambda msg: None)
    state = ReqState("r0", 0, asyncio.Event(), time.perf_counter())
    tm.rid_to_state["r0"] = state
    for i in range(NUM_STEPS):
        push.put(_step(i))
    await asyncio.sleep(0.3)  # the whole backlog reaches the inbox before the loop starts
    loop_task = asyncio.create_task(receive_loop(tm, inbox))
    turns = []
    while len(state.out_list) < NUM_STEPS:
        turns.append(len(state.out_list))
        await asyncio.sleep(0)
    loop_task.cancel()
    push.close()
    inbox.close()
    return turns


def test_other_tasks_get_a_turn_at_every_step(tmp_path):
    turns = asyncio.run(_turns_while_draining(ipc.endpoint(str(tmp_path), "inbox")))
    handled_per_turn = [b - a for a, b in zip(turns, turns[1:], strict=False)]
    assert len(turns) >= NUM_STEPS and max(handled_per_turn) <= 1, turns
