"""Chunked prefill inside the engine: a scheduler batch becomes forwards of at most
``--chunked-prefill-size`` tokens (upstream's flag), so a long prompt prefills in pieces over
the KV pool (each piece attends to the earlier ones through the cache) and activations stay
bounded whatever the prompt length.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Piece:
    """Positions ``start..end-1`` of the request in table row ``row``, run in one forward."""

    row: int
    start: int
    end: int
    ids: Sequence[int]  # (end - start,) token ids (list or array('q') slice)
    is_last: bool  # ends at the request's last new position: its logits are wanted


def split_into_forwards(pieces: Sequence[Piece], max_tokens: int) -> Iterator[list[Piece]]:
    """Cut ``pieces`` (one per request, in order) into forwards of at most ``max_tokens``
    tokens. A request's parts run in order in successive forwards, so the rows whose
    ``is_last`` is set come out in request order."""
    forward: list[Piece] = []
    room = max_tokens
    for piece in pieces:
        start = piece.start
        while start < piece.end:
            if room == 0:
                yield forward
                forward, room = [], max_tokens
            take = min(room, piece.end - start)
            offset = start - piece.start
            forward.append(Piece(piece.row, start, start + take, piece.ids[offset:offset + take],
                                 piece.is_last and start + take == piece.end))
            start += take
            room -= take
    if forward:
        yield forward
