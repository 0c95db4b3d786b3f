"""The figures of what was sent (issue 32): request bytes, images, embeddings inputs.

Keys are flat summary keys (the JSON's top level, the table's rows); those that do not apply to a
run are None, so the table and the page leave them out.
"""

from __future__ import annotations

from collections.abc import Callable

from loadgen.measure.records import RequestRecord
from loadgen.plan.config import RunConfig

#: The summary's note where token latencies do not apply (an embeddings answer is one JSON object).
NO_TOKEN_LATENCIES = "n/a for embeddings"


def input_figures(cfg: RunConfig, records: list[RequestRecord], ok: list[RequestRecord],
                  per_s: Callable[[float], float]) -> dict:
    """Bytes sent (every request sent, failed ones too), images sent, and for embeddings the inputs
    answered (one vector each) and their rate."""
    sent = [r.request_bytes for r in records]
    total_bytes = sum(sent)
    out = {"total_request_bytes": total_bytes, "mean_request_bytes": total_bytes / len(sent) if sent else None,
           "images_per_request": cfg.image_batch_size or None,
           "total_images": cfg.image_batch_size * len(records) if cfg.image_batch_size else None,
           "total_embedding_inputs": None, "embedding_input_throughput": None, "token_latencies": None}
    if cfg.is_embeddings:
        inputs = sum(r.num_embeddings for r in ok)
        out.update({"total_embedding_inputs": inputs, "embedding_input_throughput": per_s(inputs),
                    "token_latencies": NO_TOKEN_LATENCIES})
    return out
