"""Typed push/pull queues over ZeroMQ IPC sockets, so stage code never touches sockets.

Messages are msgspec Structs (see ``messages``) encoded as msgpack; a frame that decodes to no
message is dropped and logged, never raised into the stage's loop.

Backpressure: the output path (scheduler → detokenizer → HTTP process) is bounded at
``OUTPUT_HWM`` messages on each side of each hop, so when the HTTP process falls behind the
detokenizer and then the scheduler block on their send instead of piling up engine steps in the
HTTP process's inbox (a backlog that took minutes to drain after clients vanished). The
scheduler's own inbox stays unbounded: the HTTP process sends from its event loop and must
never block there, and what it sends (requests, aborts, stats probes) is small. Upstream SGLang
leaves every queue unbounded; here, with vanished clients, that let the scheduler run tens of
thousands of steps ahead, and the HTTP process then spent seconds decoding outputs of requests
already aborted.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
from typing import Any, Generic, TypeVar

import msgspec
import zmq
import zmq.asyncio

T = TypeVar("T")
logger = logging.getLogger(__name__)

SCHEDULER_IN = "scheduler_in"
DETOKENIZER_IN = "detokenizer_in"
TOKENIZER_MANAGER_IN = "tokenizer_manager_in"
OUTPUT_HWM = 256  # messages (engine steps) per side of each output hop; 0 means unbounded
_HWM = {SCHEDULER_IN: 0, DETOKENIZER_IN: OUTPUT_HWM, TOKENIZER_MANAGER_IN: OUTPUT_HWM}


def endpoint(ipc_dir: str, name: str) -> str:
    """The zmq address of the named input socket."""
    return "ipc://" + os.path.join(ipc_dir, name)


def high_water_mark(address: str) -> int:
    """The zmq high-water mark of the input socket at ``address`` (0: unbounded)."""
    return _HWM.get(os.path.basename(address), 0)


class PushQueue:
    """Sends messages to a stage's input socket (blocking sends)."""

    def __init__(self, ctx: zmq.Context, address: str):
        self._sock = ctx.socket(zmq.PUSH)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.setsockopt(zmq.SNDHWM, high_water_mark(address))
        self._sock.connect(address)
        self._encoder = msgspec.msgpack.Encoder()

    def put(self, msg: Any) -> None:
        self._sock.send(self._encoder.encode(msg), copy=False)

    def close(self) -> None:
        self._sock.close()


_DROPPED = object()  # what ``_Decoding.decode`` gives for a frame that is no message


class _Decoding:
    """Frames into messages. A frame that is no message (anyone who can reach the socket may
    send one) is dropped and logged, the 1st, 2nd, 4th, 8th... time, so a flood cannot flood
    the log."""

    def __init__(self, address: str, msg_type: Any):
        self._decoder = msgspec.msgpack.Decoder(msg_type)
        self._name = os.path.basename(address)
        self.num_dropped = 0

    def decode(self, frame: zmq.Frame) -> Any:
        """The message in ``frame``, or ``_DROPPED``."""
        try:
            return self._decoder.decode(frame.buffer)
        except msgspec.DecodeError as exc:  # a ValidationError is a DecodeError too
            self.num_dropped += 1
            if self.num_dropped & (self.num_dropped - 1) == 0:
                logger.warning("dropped a frame of %d bytes on %s that is no message (%s); %d "
                               "dropped so far", len(frame.buffer), self._name, exc, self.num_dropped)
            return _DROPPED


class PullQueue(Generic[T]):
    """A stage's own input socket (bound), decoding into the given message type."""

    def __init__(self, ctx: zmq.Context, address: str, msg_type: Any):
        self._sock = ctx.socket(zmq.PULL)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.setsockopt(zmq.RCVHWM, high_water_mark(address))
        self._sock.bind(address)
        self._decoding = _Decoding(address, msg_type)

    def get(self, timeout_ms: int | None = None) -> T | None:
        """The next message, or None when none came within ``timeout_ms``."""
        while timeout_ms is None or self._sock.poll(timeout_ms):
            msg = self._decoding.decode(self._sock.recv(copy=False))
            if msg is not _DROPPED:
                return msg
        return None

    def get_nowait(self) -> T | None:
        while True:
            try:
                msg = self._decoding.decode(self._sock.recv(zmq.NOBLOCK, copy=False))
            except zmq.Again:
                return None
            if msg is not _DROPPED:
                return msg

    def close(self) -> None:
        self._sock.close()


class AsyncPullQueue(Generic[T]):
    """``PullQueue`` for an asyncio event loop, receiving as ``--ipc-recv no-yield``.

    An awaited ``get`` resolves at once when a message is already queued (pyzmq receives it
    inside ``recv``), so a receive loop does not yield while a backlog lasts. Upstream SGLang
    with ``SGLANG_USE_PICKLE_IPC=0`` (``await socket.recv()`` + msgpack) receives this way.
    """

    def __init__(self, ctx: zmq.asyncio.Context, address: str, msg_type: Any):
        self._sock = ctx.socket(zmq.PULL)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.setsockopt(zmq.RCVHWM, high_water_mark(address))
        self._sock.bind(address)
        self._decoding = _Decoding(address, msg_type)

    async def get(self) -> T:
        while True:
            msg = self._decoding.decode(await self._sock.recv(copy=False))
            if msg is not _DROPPED:
                return msg

    def close(self) -> None:
        self._sock.close()


class ChainedAsyncPullQueue(AsyncPullQueue[T]):
    """Receives as ``--ipc-recv yield``: upstream SGLang's default (``SGLANG_USE_PICKLE_IPC``).

    pyzmq's async ``recv_pyobj`` hands the frame through a second future, resolved by a done
    callback of the first; callbacks run on a later loop turn, so every message, even one
    already queued, gives the event loop a turn before the receive loop sees it. This queue
    decodes in such a callback in the same way.
    """

    def get(self) -> asyncio.Future[T]:
        decoded: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._receive_into(decoded)
        return decoded

    def _receive_into(self, decoded: asyncio.Future[T]) -> None:
        received = self._sock.recv(copy=False)
        received.add_done_callback(functools.partial(self._hand_over, decoded))
        decoded.add_done_callback(functools.partial(_cancel_pending, received))

    def _hand_over(self, decoded: asyncio.Future[T], received: asyncio.Future) -> None:
        if decoded.done():  # cancelled: the message is dropped, as with pyzmq
            return
        if received.cancelled():
            decoded.cancel()
        elif received.exception() is not None:
            decoded.set_exception(received.exception())
        else:
            msg = self._decoding.decode(received.result())
            if msg is _DROPPED:
                self._receive_into(decoded)
            else:
                decoded.set_result(msg)


def _cancel_pending(received: asyncio.Future, decoded: asyncio.Future) -> None:
    if decoded.cancelled() and not received.done():
        received.cancel()


ASYNC_PULL_QUEUES: dict[str, type[AsyncPullQueue]] = {
    "yield": ChainedAsyncPullQueue,
    "no-yield": AsyncPullQueue,
}
"""The HTTP process's inbox for each ``--ipc-recv`` regime."""
