"""The HTTP process: uvicorn (uvloop, httptools) serving the app, plus the receive loop."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable

import uvicorn
import uvloop
import zmq
import zmq.asyncio

from reference_impl import ipc
from reference_impl.config import ServerArgs
from reference_impl.messages import BatchStrOutput, ToTokenizerManager
from reference_impl.server.app import create_app
from reference_impl.server.connection import timed_http_protocol
from reference_impl.server.metrics import ServerMetrics
from reference_impl.server.tokenizer_manager import TokenizerManager
from reference_impl.tokenizer import get_tokenizer

logger = logging.getLogger(__name__)
_SCHEDULER_START_TIMEOUT_S = 600.0


def run(args: ServerArgs, ready: Callable[..., None]) -> None:
    """Serve until stopped."""
    uvloop.run(_serve(args, ready))


async def _serve(args: ServerArgs, ready: Callable[..., None]) -> None:
    tokenizer = get_tokenizer(args.tokenizer_path)
    inbox = ipc.ASYNC_PULL_QUEUES[args.ipc_recv](
        zmq.asyncio.Context(), ipc.endpoint(args.ipc_dir, ipc.TOKENIZER_MANAGER_IN), ToTokenizerManager)
    to_scheduler = ipc.PushQueue(zmq.Context(), ipc.endpoint(args.ipc_dir, ipc.SCHEDULER_IN))
    metrics = ServerMetrics()
    tm = TokenizerManager(args, to_scheduler.put, metrics)
    receiver = asyncio.create_task(receive_loop(tm, inbox))
    receiver.add_done_callback(_exit_if_failed)
    # NOTE: the scheduler answers once its engine is built; the launcher's ready timeout bounds this.
    stats = await tm.get_scheduler_stats(_SCHEDULER_START_TIMEOUT_S)
    max_req_kv_tokens = stats.max_total_tokens // args.dp_size
    server = uvicorn.Server(uvicorn.Config(
        create_app(args, tm, tokenizer, metrics, max_req_kv_tokens), host=args.host, port=args.port,
        log_level=args.log_level, access_log=False,
        http=timed_http_protocol(args.timeout_request_read, args.max_request_header_bytes,
                                 args.timeout_response_write),
        lifespan="off", backlog=8192, timeout_keep_alive=args.timeout_keep_alive,
        limit_concurrency=args.limit_concurrency, timeout_graceful_shutdown=2,
    ))
    serving = asyncio.create_task(server.serve())
    while not server.started:
        if serving.done():
            serving.result()
            raise RuntimeError(f"HTTP server did not start on {args.host}:{args.port}")
        await asyncio.sleep(0.02)
    ready(port=server.servers[0].sockets[0].getsockname()[1])  # --port 0: the kernel's choice
    await serving


async def receive_loop(tm: TokenizerManager, inbox: ipc.AsyncPullQueue) -> None:
    """Hand each message from the detokenizer to the tokenizer manager, forever.

    Whether the event loop gets a turn between queued messages is the inbox's (``--ipc-recv``):
    with 'yield' (upstream's default) it does once per message, so disconnects and woken
    streams run once per engine step; with 'no-yield' a backlog is drained in one go.
    """
    while True:
        msg = await inbox.get()
        if isinstance(msg, BatchStrOutput):
            await tm.handle_batch(msg)
        else:
            tm.handle_stats(msg)


def _exit_if_failed(task: asyncio.Task) -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.error("receive loop failed", exc_info=task.exception())
        os._exit(1)
