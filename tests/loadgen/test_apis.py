"""issue 32, APIs: embeddings, the Responses API and vision inputs, run end to end through the CLI
against the scripted server, with the figures checked against what the server saw."""

from __future__ import annotations

import base64
import io
import json
import subprocess
import sys

import httpx
import pytest
from PIL import Image

from loadgen.cli import main
from loadgen.flags import images_note
from loadgen.measure.records import RequestRecord
from loadgen.plan.config import RunConfig
from loadgen.plan.inputs import synthetic_image
from loadgen.run.client import RawResponse, finish_record

TTFT_MS, GAP_MS, NUM_TOKENS, NUM = 40, 10, 5, 6


def _run(server, out, *flags: str) -> int:
    return main(["--base-url", server.base_url, "--num-prompts", str(NUM), "--concurrency", "2",
                 "--random-input-len", "12", "--random-output-len", str(NUM_TOKENS), "--random-range-ratio", "1",
                 "--no-server-metrics", "--no-server-tokenize", "--output", str(out), *flags])


def _last_body(server) -> dict:
    return httpx.get(server.base_url + "/last_request", timeout=10).json()["body"]


def test_embeddings_report_latency_inputs_and_tokens_and_no_token_latencies(start_server, tmp_path, capsys):
    server = start_server("--ttft-ms", str(TTFT_MS))
    out = tmp_path / "emb.json"
    assert _run(server, out, "--backend", "openai-embeddings", "--random-batch-size", "3") == 0
    data, stats = json.loads(out.read_text()), server.stats()
    assert data["completed"] == NUM and data["failed"] == 0
    assert data["total_embedding_inputs"] == stats["embedding_inputs"] == 3 * NUM
    assert data["total_input_tokens"] == stats["embedding_prompt_tokens"]  # the server's usage.prompt_tokens
    assert data["embedding_input_throughput"] == pytest.approx(3 * NUM / data["duration"])
    assert data["input_throughput"] == pytest.approx(stats["embedding_prompt_tokens"] / data["duration"])
    # NOTE: the server answers TTFT_MS after the request arrives: no latency can be shorter.
    assert data["summary"]["max_e2e_latency_ms"] >= data["median_e2e_latency_ms"] >= TTFT_MS
    for name in ("ttft", "tpot", "itl"):
        assert data[f"mean_{name}_ms"] is None
    assert data["token_latencies"] == "n/a for embeddings"
    body = _last_body(server)
    assert len(body["input"]) == 3 and all(isinstance(text, str) and text for text in body["input"])
    table = capsys.readouterr().out
    assert "TTFT, TPOT, ITL: n/a for embeddings" in table and "\nTTFT " not in table
    assert "Output token throughput" not in table.split(" details ")[0]
    headline = {line.split(":")[0]: line.split()[-1] for line in table.split(" details ")[0].splitlines()
                if ":" in line}
    assert headline["Embeddings inputs answered"] == str(3 * NUM)
    page = tmp_path / "emb.html"
    assert main(["report", str(out), "--output", str(page)]) == 0
    html = page.read_text()
    assert "TTFT mean (ms)</td><td class='num'>n/a for embeddings" in html
    assert "Embeddings input throughput (inputs/s)" in html


def test_responses_stream_is_timed_as_chat(start_server, tmp_path):
    server = start_server("--ttft-ms", str(TTFT_MS), "--gap-ms", str(GAP_MS), "--num-tokens", str(NUM_TOKENS))
    out, recs = tmp_path / "resp.json", tmp_path / "resp.jsonl"
    assert _run(server, out, "--backend", "openai-responses", "--records", str(recs)) == 0
    data, stats = json.loads(out.read_text()), server.stats()
    assert data["completed"] == NUM and data["failed"] == 0
    assert data["total_output_tokens"] == data["total_output_tokens_client"] == NUM * NUM_TOKENS
    assert data["output_tokens_source"] == "usage"
    rows = [json.loads(line) for line in recs.read_text().splitlines()]
    assert all(len(r["chunk_ms"]) == NUM_TOKENS for r in rows)
    assert sum(r["request_bytes"] for r in rows) == data["total_request_bytes"] == stats["request_body_bytes"]
    assert sum(r["usage_prompt_tokens"] for r in rows) == data["total_input_tokens"] > 0
    # NOTE: the client sees each first token after the server wrote it: sorted, each TTFT is at
    # least the server's own (arrival to write).
    ttfts = sorted(r["ttft_ms"] for r in rows)
    assert all(c >= s for c, s in zip(ttfts, sorted(stats["ttft_ms"]), strict=True))
    assert data["mean_tpot_ms"] is not None and data["mean_itl_ms"] is not None
    assert data["token_latencies"] is None
    # every stream counted as awaiting its first token until it came (the prefill-cap's count)
    assert stats["awaiting_first_token"] == 0 and 1 <= stats["max_awaiting_first_token"] <= 2
    body = _last_body(server)
    assert body["stream"] is True and body["max_output_tokens"] == NUM_TOKENS and isinstance(body["input"], str)


def test_a_broken_responses_stream_is_counted_not_fatal(start_server, tmp_path):
    server = start_server("--ttft-ms", "5", "--gap-ms", "2", "--faults", "ok,malformed")
    out = tmp_path / "bad.json"
    assert _run(server, out, "--backend", "openai-responses") == 0
    data = json.loads(out.read_text())
    assert data["completed"] == NUM // 2 and data["summary"]["errors"]["malformed_sse"]["count"] == NUM // 2


def test_images_go_as_image_url_parts_and_their_bytes_are_reported(start_server, tmp_path):
    server = start_server("--ttft-ms", "5", "--gap-ms", "2")
    out, page = tmp_path / "img.json", tmp_path / "img.html"
    flags = ("--image-batch-size", "2", "--image-width-mean", "64", "--image-height-mean", "32")
    assert _run(server, out, *flags) == 0
    data, stats = json.loads(out.read_text()), server.stats()
    assert data["completed"] == NUM and stats["image_parts"] == data["total_images"] == 2 * NUM
    assert data["total_request_bytes"] == stats["request_body_bytes"]  # every byte the server received
    assert data["mean_request_bytes"] == pytest.approx(stats["request_body_bytes"] / NUM)
    text, *images = _last_body(server)["messages"][0]["content"]
    assert text["type"] == "text" and len(images) == 2
    for part in images:
        head, _, encoded = part["image_url"]["url"].partition(",")
        assert head == "data:image/png;base64"
        image = Image.open(io.BytesIO(base64.b64decode(encoded)))
        assert image.format == "PNG" and image.size == (64, 32)
    assert data["total_request_bytes"] > 2 * NUM * 64 * 32 * 3  # random pixels barely compress
    assert main(["report", str(out), "--output", str(page)]) == 0
    html = page.read_text()
    assert "Request bytes sent (total)" in html and f"{data['total_request_bytes']:,}" in html
    assert "Images sent" in html


def test_synthetic_images_are_reproducible_by_seed_and_index():
    one = synthetic_image(1, (0, 0), 16, 8, "jpeg")
    assert one == synthetic_image(1, (0, 0), 16, 8, "jpeg") and one.startswith("data:image/jpeg;base64,")
    assert one != synthetic_image(1, (0, 1), 16, 8, "jpeg") != synthetic_image(2, (0, 0), 16, 8, "jpeg")
    image = Image.open(io.BytesIO(base64.b64decode(one.partition(",")[2])))
    assert image.format == "JPEG" and image.size == (16, 8)


def _raw(backend: str, body: bytes, num_inputs: int = 1) -> RawResponse:
    rec = RequestRecord(index=0, worker=0, intended_ns=0, start_ns=0, end_ns=10)
    return RawResponse(rec, chunks=[body], stamps=[10], is_stream=backend != "openai-embeddings", backend=backend,
                       num_inputs=num_inputs)


def _event(kind: str, **fields) -> bytes:
    return b"event: " + kind.encode() + b"\ndata: " + json.dumps({"type": kind, **fields}).encode() + b"\n\n"


COMPLETED = _event("response.completed", response={"usage": {"input_tokens": 7, "output_tokens": 2}})


@pytest.mark.parametrize(("body", "error_class"), [
    (_event("response.output_text.delta", delta="a") + COMPLETED, None),
    (_event("response.output_text.delta", delta="a"), "malformed_sse"),  # no response.completed
    (_event("response.output_text.delta", delta="a") + _event("response.failed", response={"error": {"x": 1}}),
     "server_error_event"),
    (_event("error", message="overloaded"), "server_error_event"),
    (b"data: {not json\n\n" + COMPLETED, "malformed_sse"),
    (_event("response.completed", response={"usage": {"input_tokens": -1}}), "malformed_sse"),
])
def test_responses_stream_errors_are_classed(body, error_class):
    rec = finish_record(_raw("openai-responses", body))
    assert rec.error_class == error_class, rec.error_message
    if error_class is None:
        assert (rec.usage_prompt_tokens, rec.usage_completion_tokens, len(rec.chunk_ns)) == (7, 2, 1)


def test_an_embeddings_answer_short_of_vectors_is_an_error():
    body = json.dumps({"data": [{"index": 0, "embedding": [0.1]}], "usage": {"prompt_tokens": 4}}).encode()
    assert finish_record(_raw("openai-embeddings", body, num_inputs=1)).error_class is None
    rec = finish_record(_raw("openai-embeddings", body, num_inputs=2))
    assert rec.error_class == "malformed_sse" and "1 vectors for 2 inputs" in rec.error_message


@pytest.mark.parametrize(("flags", "message"), [
    (["--random-batch-size", "2"], "--random-batch-size applies to --backend openai-embeddings"),
    (["--image-batch-size", "1", "--backend", "openai-completions"], "needs --backend openai-chat"),
    (["--backend", "openai-responses", "--no-stream"], "--no-stream is not supported"),
    (["--backend", "openai-embeddings", "--dataset", "multi-turn"], "multi-turn needs --backend"),
])
def test_api_flags_that_do_not_combine_are_usage_errors(flags, message, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--num-prompts", "1", "--concurrency", "1", *flags])
    assert exc.value.code == 2 and message in capsys.readouterr().err


def test_images_without_pillow_name_the_extra_in_one_line():
    code = ("import sys; sys.modules['PIL'] = None; from loadgen.cli import main; "
            "sys.exit(main(['--num-prompts', '1', '--concurrency', '1', '--image-batch-size', '1']))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "pip install 'serving-hotpaths[vision]'" in proc.stderr.strip().splitlines()[-1]


def test_images_that_may_not_fit_in_memory_are_warned_about():
    cfg = RunConfig(num_prompts=1000, concurrency=4, image_batch_size=2, image_width=512, image_height=512)
    bound = 1000 * 2 * 512 * 512 * 4  # about 2 GB: random pixels, base64
    assert images_note(cfg, 2 * bound) is None
    note = images_note(cfg, 2 * bound - 2)
    assert note is not None and "1,000 request bodies with 2 512x512 image(s)" in note and "2.0 GiB" in note
    assert images_note(RunConfig(num_prompts=1000, concurrency=4), 1) is None


def test_a_responses_stream_over_several_reads_takes_each_reads_stamp():
    delta = [_event("response.output_text.delta", delta=text) for text in ("a", "b", "c")]
    raw = _raw("openai-responses", b"")
    raw.chunks, raw.stamps = [delta[0], delta[1], delta[2] + COMPLETED], [10, 20, 30]
    rec = finish_record(raw)
    assert rec.error_class is None, rec.error_message
    assert rec.chunk_ns == [10, 20, 30] and rec.first_token_ns == 10
    assert rec.num_coalesced_events == 0
