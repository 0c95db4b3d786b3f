"""What loadgen needs from httpx's own transport (`--transport httpx`, and https) that httpx has no
setting for: a bound on what h11 buffers before a complete head, and never reusing a connection
that holds bytes nobody asked for.

Both are set on httpcore's HTTP/1.1 connection class, once per worker process (a worker has one
client, so the class-wide values are its run's).
"""

from __future__ import annotations

from httpcore._async.http11 import AsyncHTTP11Connection

_has_expired = AsyncHTTP11Connection.has_expired


def _has_expired_or_stray(self: AsyncHTTP11Connection) -> bool:
    # NOTE: bytes that came after a complete response (a second, unasked one) sit in h11's buffer,
    # where httpcore's check of the socket cannot see them; reused, the connection would hand
    # them to the next request as its answer.
    state = getattr(self, "_h11_state", None)
    return _has_expired(self) or (state is not None and bool(state.trailing_data[0]))


def apply(max_head_bytes: int) -> None:
    """Bound h11's buffer for an incomplete head, and drop idle connections holding unread bytes."""
    AsyncHTTP11Connection.MAX_INCOMPLETE_EVENT_SIZE = max_head_bytes
    AsyncHTTP11Connection.has_expired = _has_expired_or_stray
