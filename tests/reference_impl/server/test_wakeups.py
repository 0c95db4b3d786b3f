"""H1: the real output handler delivers every output exactly once, in order, to 2048 streams."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from reference_impl.config import ServerArgs
from reference_impl.hot_paths import HOT_PATHS
from reference_impl.messages import (
    BatchStrOutput,
    FinishReason,
    SamplingParams,
    TokenizedGenerateReq,
)
from reference_impl.server.tokenizer_manager import TokenizerManager
from reference_impl.server.wakeups import Wakeups

NUM_STREAMS = 2048
NUM_STEPS = 12


def _finish_step(i: int) -> int:
    """Requests finish at different steps, so some finish inside every batch."""
    return 3 + i % (NUM_STEPS - 3)


def _batch(step: int, rids: list[str]) -> BatchStrOutput:
    live = [r for r in rids if step <= _finish_step(int(r[1:]))]
    return BatchStrOutput(
        rids=live,
        texts=[f"{step}," for _ in live],
        new_token_ids=[[step] for _ in live],
        finish_reasons=[FinishReason("length") if step == _finish_step(int(r[1:])) else None
                        for r in live],
        prompt_tokens=[1] * len(live),
        completion_tokens=[step + 1] * len(live),
    )


async def _deliver(args: ServerArgs) -> dict[str, list]:
    sent: list = []
    tm = TokenizerManager(args, sent.append)
    seen: dict[str, list] = {}

    async def consume(rid: str) -> None:
        req = TokenizedGenerateReq(rid, [1], SamplingParams(max_new_tokens=NUM_STEPS), stream=True)
        async for _, out in tm.generate([req], [0]):
            seen[rid].append((out.text, out.text_start, list(out.output_ids), out.finish_reason))

    rids = [f"r{i}" for i in range(NUM_STREAMS)]
    for rid in rids:
        seen[rid] = []
    consumers = [asyncio.create_task(consume(rid)) for rid in rids]
    await asyncio.sleep(0)
    for step in range(NUM_STEPS):
        await tm.handle_batch(_batch(step, rids))
        await asyncio.sleep(0)
    await asyncio.wait_for(asyncio.gather(*consumers), 60)
    assert not tm.rid_to_state and len(sent) == NUM_STREAMS
    return seen


FORMS = [("immediate", 16), ("batched", 1), ("batched", 16), ("batched", 64), ("batched", 0)]


@pytest.mark.parametrize(("wakeup", "size"), FORMS)
def test_incremental_outputs_arrive_exactly_once_in_order(wakeup, size):
    args = ServerArgs(wakeup=wakeup, batch_notify_size=size, incremental_streaming_output=True)
    seen = asyncio.run(_deliver(args))
    for rid, outs in seen.items():
        last = _finish_step(int(rid[1:]))
        assert "".join(text for text, _, _, _ in outs) == "".join(f"{s}," for s in range(last + 1))
        assert [i for _, _, ids, _ in outs for i in ids] == list(range(last + 1))
        assert [f for _, _, _, f in outs].count(None) == len(outs) - 1 and outs[-1][3] is not None


def _whole_texts(outs: list) -> list[str]:
    """Each output's whole text so far, rebuilt from ``(text, text_start)``."""
    texts, whole = [], ""
    for text, start, _, _ in outs:
        assert start <= len(whole)
        whole = whole[:start] + text
        texts.append(whole)
    return texts


@pytest.mark.parametrize("stream_output", ["copy", "reference", "reference-full"])
@pytest.mark.parametrize(("wakeup", "size"), FORMS)
def test_cumulative_outputs_grow_and_end_complete(wakeup, size, stream_output):
    args = ServerArgs(wakeup=wakeup, batch_notify_size=size, stream_output=stream_output)
    seen = asyncio.run(_deliver(args))
    for rid, outs in seen.items():
        last = _finish_step(int(rid[1:]))
        texts = _whole_texts(outs)
        assert all(b.startswith(a) and len(b) > len(a) for a, b in zip(texts, texts[1:], strict=False))
        assert texts[-1] == "".join(f"{s}," for s in range(last + 1))
        assert outs[-1][1] == 0, "the final output holds the whole text"
        assert outs[-1][2] == list(range(last + 1)) and outs[-1][3].type == "length"


@pytest.mark.parametrize(("wakeup", "size"), FORMS)
def test_tail_outputs_hold_only_the_new_text(wakeup, size):
    seen = asyncio.run(_deliver(ServerArgs(wakeup=wakeup, batch_notify_size=size)))
    for outs in seen.values():
        starts = [start for _, start, _, _ in outs[:-1]]
        lens = [len(text) for text, _, _, _ in outs[:-1]]
        assert starts == [sum(lens[:k]) for k in range(len(lens))]


async def _wake_order(form: str, size: int, num_reqs: int) -> list[str]:
    """The event-loop order of "queued i" (the handler) and "woke i" (each waiting consumer)."""
    log: list[str] = []
    events = [asyncio.Event() for _ in range(num_reqs)]

    async def consumer(i: int) -> None:
        await events[i].wait()
        log.append(f"woke {i}")

    def process_one(batch, i: int):
        log.append(f"queued {i}")
        return SimpleNamespace(event=events[i])

    tasks = [asyncio.create_task(consumer(i)) for i in range(num_reqs)]
    await asyncio.sleep(0)
    batch = SimpleNamespace(rids=[f"r{i}" for i in range(num_reqs)])
    await HOT_PATHS["H1"].create(form, size).deliver(batch, process_one)
    await asyncio.gather(*tasks)
    return log


def test_immediate_wakes_no_stream_before_the_whole_batch_is_queued():
    log = asyncio.run(_wake_order("immediate", 4, 10))
    assert log == [f"queued {i}" for i in range(10)] + [f"woke {i}" for i in range(10)]


@pytest.mark.parametrize("size", [1, 4])
def test_batched_wakes_each_group_before_queueing_the_next(size):
    log = asyncio.run(_wake_order("batched", size, 10))
    expected, full = [], 10 - 10 % size
    for start in range(0, full, size):
        group = range(start, start + size)
        expected += [f"queued {i}" for i in group] + [f"woke {i}" for i in group]
    rest = range(full, 10)  # the remainder is set without a yield: woken after deliver returns
    expected += [f"queued {i}" for i in rest] + [f"woke {i}" for i in rest]
    assert log == expected


def test_every_wakeup_form_is_a_wakeups_and_unknown_ones_are_refused():
    h1 = HOT_PATHS["H1"]
    assert all(isinstance(h1.create(form, 16), Wakeups) for form in h1.choices)
    with pytest.raises(ValueError, match="immediate, batched"):
        h1.create("sometimes", 16)


@pytest.mark.parametrize(("form", "size"), [("immediate", 16), ("batched", 1), ("batched", 3)])
def test_untracked_requests_are_processed_once_and_count_toward_no_group(form, size):
    """``process_one`` returns None for a request no longer tracked: no event, no group slot."""
    calls: list[int] = []
    events = {i: asyncio.Event() for i in range(10) if i % 3 != 1}
    set_at_turn: list[int] = []

    def process_one(batch, i: int):
        calls.append(i)
        return SimpleNamespace(event=events[i]) if i in events else None

    async def run() -> None:
        done = False

        async def ticker() -> None:
            while not done:
                set_at_turn.append(sum(e.is_set() for e in events.values()))
                await asyncio.sleep(0)

        task = asyncio.create_task(ticker())
        await asyncio.sleep(0)
        set_at_turn.clear()
        batch = SimpleNamespace(rids=[f"r{i}" for i in range(10)])
        await HOT_PATHS["H1"].create(form, size).deliver(batch, process_one)
        done = True
        await task

    asyncio.run(run())
    assert calls == list(range(10)) and all(e.is_set() for e in events.values())
    # 7 tracked requests: a loop turn after each full group of them, none after the remainder
    assert set_at_turn == ([] if form == "immediate" else list(range(size, 8, size)))
