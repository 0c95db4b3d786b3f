"""--max-queued-output-bytes: a stream whose consumer is away (writing to a client that does not
read) is cut off once its untaken outputs pass the bound, in every H3 form; a consumer that is
only waiting for the event loop is never cut."""

from __future__ import annotations

import asyncio

import pytest

from reference_impl.config import ServerArgs
from reference_impl.messages import AbortReq, BatchStrOutput, SamplingParams, TokenizedGenerateReq
from reference_impl.server.tokenizer_manager import TokenizerManager

FORMS = {"copy": {"stream_output": "copy"}, "reference": {"stream_output": "reference"},
         "reference-full": {"stream_output": "reference-full"},
         "incremental": {"incremental_streaming_output": True}}
TEXT = "token "


def _batch(rids: list[str], step: int) -> BatchStrOutput:
    return BatchStrOutput(rids=rids, texts=[TEXT] * len(rids), new_token_ids=[[step]] * len(rids),
                          finish_reasons=[None] * len(rids), prompt_tokens=[1] * len(rids),
                          completion_tokens=[step + 1] * len(rids))


def _reqs(rid: str, n: int) -> list[TokenizedGenerateReq]:
    sampling = SamplingParams(max_new_tokens=100_000)
    return [TokenizedGenerateReq(f"{rid}-{c}", [1], sampling, stream=True, choice_index=c)
            for c in range(n)]


async def _feed_until_cut(tm: TokenizerManager, rids: list[str], max_steps: int) -> int:
    for step in range(max_steps):
        await tm.handle_batch(_batch([r for r in rids if r in tm.rid_to_state], step))
        await asyncio.sleep(0)  # pumps of the other choices run, and block on the full queue
        if not tm.rid_to_state:
            return step
    return -1


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("n", [1, 3])
def test_a_consumer_away_past_the_bound_is_cut_off(form, n):
    async def run() -> None:
        sent: list = []
        tm = TokenizerManager(ServerArgs(max_queued_output_bytes=20_000, **FORMS[form]), sent.append)
        reqs = _reqs("r", n)
        stream = tm.generate(reqs, list(range(n)))
        rids = [r.rid for r in reqs]
        first = asyncio.ensure_future(stream.__anext__())
        await asyncio.sleep(0)  # the stream sends its requests and waits
        await tm.handle_batch(_batch(rids, 0))
        await first  # the consumer now "writes" this output and never comes back
        await asyncio.sleep(0.01)  # let the other choices' pumps fill the merged queue
        step = await _feed_until_cut(tm, rids, 20_000)
        assert step > 0, "never cut off"
        assert {m.rid for m in sent if isinstance(m, AbortReq)} == set(rids)
        with pytest.raises(ConnectionAbortedError):
            while True:
                await stream.__anext__()
        await stream.aclose()

    asyncio.run(run())


@pytest.mark.parametrize("form", FORMS)
def test_a_consumer_that_waits_for_the_loop_is_never_cut(form):
    async def run() -> None:
        tm = TokenizerManager(ServerArgs(max_queued_output_bytes=20_000, **FORMS[form]),
                              lambda msg: None)
        texts: list[str] = []

        async def consume() -> None:
            async for _, out in tm.generate(_reqs("r", 1), [0]):
                texts.append(out.text)

        consumer = asyncio.create_task(consume())
        await asyncio.sleep(0)  # parked on its event
        for step in range(2000):  # far past the bound, without giving the consumer a turn
            await tm.handle_batch(_batch(["r-0"], step))
        assert "r-0" in tm.rid_to_state
        await asyncio.sleep(0)
        assert len("".join(texts) if form == "incremental" else texts[-1]) >= len(TEXT) * 2000
        consumer.cancel()

    asyncio.run(run())
