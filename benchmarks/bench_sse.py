"""H2 SSE encoding of chat chunks: pydantic (legacy) vs msgspec (optimized)."""

from benchmarks.common import FORMS, Bench, history_safe
from benchmarks.workloads import H2_CHUNKS, ChunkEncoding, form_args


class TimeChatChunk(Bench):
    """One chat chunk (first, content or finish) encoded as an SSE event."""

    params = (list(FORMS), list(H2_CHUNKS))
    param_names = ["form", "chunk"]

    def setup(self, form, chunk):
        with history_safe():
            self.workload = ChunkEncoding(form_args("H2", form), chunk)

    def time_encode(self, form, chunk):
        self.workload.run()


class TrackChatChunkBytes:
    """Bytes on the wire per chunk."""

    params = (list(FORMS), list(H2_CHUNKS))
    param_names = ["form", "chunk"]
    unit = "bytes"

    def setup(self, form, chunk):
        with history_safe():
            self.workload = ChunkEncoding(form_args("H2", form), chunk)

    def track_bytes(self, form, chunk):
        return len(self.workload.run())
