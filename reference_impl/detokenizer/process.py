"""The detokenizer process: token ids to text deltas, one stream state per request."""

from __future__ import annotations

from collections.abc import Callable

import zmq

from reference_impl import ipc
from reference_impl.config import ServerArgs
from reference_impl.detokenizer.stream import DetokenizeStream
from reference_impl.messages import BatchStrOutput, BatchTokenIDOutput, ToDetokenizer
from reference_impl.tokenizer import Tokenizer, get_tokenizer


class Detokenizer:
    """Keeps one ``DetokenizeStream`` per live request."""

    def __init__(self, tokenizer: Tokenizer):
        self._tokenizer = tokenizer
        self._streams: dict[str, DetokenizeStream] = {}

    def handle(self, batch: BatchTokenIDOutput) -> BatchStrOutput:
        texts = []
        for rid, new_ids, finish, stop_strs in zip(
                batch.rids, batch.new_token_ids, batch.finish_reasons, batch.stop_strs, strict=True):
            stream = self._streams.get(rid)
            if stream is None:
                stream = DetokenizeStream(self._tokenizer.incremental_decoder(), stop_strs)
                self._streams[rid] = stream
            texts.append(stream.step(new_ids, finish))
            if finish is not None:
                del self._streams[rid]
        return BatchStrOutput(batch.rids, texts, batch.new_token_ids, batch.finish_reasons,
                              batch.prompt_tokens, batch.completion_tokens, batch.timings)

    @property
    def num_streams(self) -> int:
        return len(self._streams)


def run(args: ServerArgs, ready: Callable[[], None]) -> None:
    """Serve until killed."""
    detokenizer = Detokenizer(get_tokenizer(args.tokenizer_path))
    ctx = zmq.Context()
    inbox = ipc.PullQueue(ctx, ipc.endpoint(args.ipc_dir, ipc.DETOKENIZER_IN), ToDetokenizer)
    to_tokenizer_manager = ipc.PushQueue(ctx, ipc.endpoint(args.ipc_dir, ipc.TOKENIZER_MANAGER_IN))
    ready()
    while True:
        msg = inbox.get()
        if isinstance(msg, BatchTokenIDOutput):
            msg = detokenizer.handle(msg)
        to_tokenizer_manager.put(msg)
