"""Server usage against the client's token count: the shortfall split into its causes, with counts.

Per request with usage, `usage - client count` is split into: empty-text events (tokens that
decoded to no text) that the rule leaves out, counted one per event; events carrying several
tokens, where the client counted one per event and the retokenized text holds more tokens than
those events; and the rest (events lost, or tokens the server counted but never sent: EOS, a
matched stop string). Where the client count follows the streamed usage, it holds every token
already: the several-token events are counted from its growth and explain no shortfall.
"""

from __future__ import annotations

from loadgen.measure.records import SOURCE_USAGE_DELTAS, RequestRecord

SOURCE_RETOKENIZED = "retokenized"


def reconcile_tokens(ok: list[RequestRecord], drops_empty_text: bool) -> dict | None:
    """The causes of `usage - client count` over the successful requests with usage (None when
    none has usage); see the module's docstring. `several_token_events_from` is None where no
    request could tell (one token per event, no tokenizer)."""
    with_usage = [r for r in ok if r.usage_completion_tokens is not None]
    if not with_usage:
        return None
    out = {"usage_minus_client": 0, "empty_text_events": 0, "empty_text_events_dropped": drops_empty_text,
           "several_token_extra": 0, "lost_or_unsent": 0}
    sources: set[str] = set()
    for r in with_usage:
        shortfall = r.usage_completion_tokens - r.client_output_tokens
        dropped = r.num_empty_text_events if drops_empty_text else 0
        extra, source = _several_tokens(r, dropped, shortfall)
        if source is not None:
            sources.add(source)
        out["usage_minus_client"] += shortfall
        out["empty_text_events"] += r.num_empty_text_events
        out["several_token_extra"] += extra
        explained = 0 if source == SOURCE_USAGE_DELTAS else dropped + extra
        out["lost_or_unsent"] += shortfall - explained
    out["several_token_events_from"] = ", ".join(sorted(sources)) or None
    return out


def _several_tokens(r: RequestRecord, dropped: int, shortfall: int) -> tuple[int, str | None]:
    """Tokens past one per event, and where that count came from: the streamed usage's growth
    (all of them), else the retokenized text past the events with text (at most the shortfall
    the dropped events leave), else unknown (0, None)."""
    if r.chunk_token_source == SOURCE_USAGE_DELTAS:
        return int(sum([t - 1 for t in r.chunk_tokens if t > 1])), SOURCE_USAGE_DELTAS
    if r.retokenized_output_tokens is None:
        return 0, None
    events_with_text = r.client_output_tokens - (r.num_empty_text_events - dropped)
    past = r.retokenized_output_tokens - events_with_text
    return max(min(past, shortfall - dropped), 0), SOURCE_RETOKENIZED
