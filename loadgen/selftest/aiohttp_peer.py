"""A bare aiohttp streaming client: the baseline `python -m loadgen.selftest.selfbench` measures loadgen against.

It reads each response as vLLM's bench client does (`response.content.iter_any()`, split at blank
lines, `json.loads` of every `data:` event, a `perf_counter` stamp per content event) and nothing more: no
records, statistics or health figures. Run as `python -m loadgen.selftest.aiohttp_peer URL STREAMS SECONDS
OUTPUT_LEN`; prints one JSON line: events, CPU seconds (and the kernel's part), voluntary
context switches and wall seconds over the run window
(start-up and imports excluded, as in loadgen's own figure).
"""

from __future__ import annotations

import asyncio
import json
import resource
import sys
import time


async def _stream(session, url: str, body: dict, stamps: list[float]) -> None:
    async with session.post(url + "/v1/chat/completions", json=body) as response:
        buffer = b""
        async for data in response.content.iter_any():
            buffer += data
            *events, buffer = buffer.split(b"\n\n")
            for event in events:
                if event.startswith(b"data: ") and event != b"data: [DONE]":
                    data = json.loads(event[6:])
                    # NOTE: content events only, as vLLM's client stamps them and loadgen counts them.
                    if (choices := data.get("choices")) and choices[0]["delta"].get("content"):
                        stamps.append(time.perf_counter())


async def _run(url: str, streams: int, seconds: float, output_len: int) -> dict:
    import aiohttp

    body = {"model": "scripted-model", "messages": [{"role": "user", "content": "hello " * 16}],
            "max_completion_tokens": output_len, "stream": True, "stream_options": {"include_usage": True}}
    stamps: list[float] = []
    connector = aiohttp.TCPConnector(limit=streams)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None)) as session:
        deadline = time.perf_counter() + seconds
        cpu0, wall0, usage0 = time.process_time(), time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)

        async def loop() -> None:
            while time.perf_counter() < deadline:
                await _stream(session, url, body, stamps)

        await asyncio.gather(*(loop() for _ in range(streams)))
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return {"events": len(stamps), "cpu_s": time.process_time() - cpu0, "wall_s": time.perf_counter() - wall0,
                "sys_cpu_s": usage.ru_stime - usage0.ru_stime, "num_sleeps": usage.ru_nvcsw - usage0.ru_nvcsw}


def main() -> None:
    """Command-line entry: URL STREAMS SECONDS OUTPUT_LEN."""
    url, streams, seconds, output_len = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
    print(json.dumps(asyncio.run(_run(url, streams, seconds, output_len))))


if __name__ == "__main__":
    main()
