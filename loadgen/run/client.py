"""One client per worker, requests prepared before the run, and one request's send/read.

The read path only stamps and keeps bytes; parsing waits until the request (or the run) is over.
Errors are classed: `http_<status>`, `timeout`, `connection`, `bad_response` (a response that breaks
HTTP/1.1, or a head past `--max-response-header-bytes`), `malformed_sse`, `server_error_event` (the
server reported an error inside the stream), `too_large` (a body past
`--max-response-bytes`, cut while it was read), `other`; and `cancelled`, a request the client
cancelled on purpose (--request-cancellation-rate), which is not a failure.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field

import httpx
import msgspec

from loadgen.measure.records import CANCELLED, RequestRecord
from loadgen.plan.config import RunConfig
from loadgen.plan.texts import Prompt
from loadgen.run import httpcore_guards
from loadgen.run.clock import now_ns
from loadgen.run.responses import decode_responses_stream, parse_embeddings
from loadgen.run.sse import (
    MalformedSSE,
    Reads,
    ServerErrorEvent,
    parse_server_timing_header,
    parse_stream,
    parse_whole,
)
from loadgen.run.transport import (
    BadResponse,
    LeanRequest,
    LeanTransport,
    ResponseTooLarge,
    StampedBody,
    head_size,
    header_cap_message,
    too_large_message,
)

_encode = msgspec.json.Encoder().encode
#: The first non-empty content (chat) or text (completions) in a chunk of SSE bytes (approximate:
#: a field split across reads is seen in the next one).
FIRST_CONTENT = re.compile(rb'"(?:content|text)":"[^"]')


def request_body(cfg: RunConfig, model: str, prompt: Prompt, images: tuple[str, ...] = ()) -> bytes:
    """The JSON request body for one prompt (OpenAI field names); `images`: data URLs sent as chat
    `image_url` parts after the text."""
    if cfg.backend in API_BODIES:
        return _encode({**API_BODIES[cfg.backend](cfg, model, prompt), **cfg.sampling, **cfg.extra_body})
    body: dict = {"model": model, "stream": cfg.stream, "max_tokens": prompt.output_len}
    if cfg.backend == "openai-chat":
        content = prompt.prompt if not images else [{"type": "text", "text": prompt.prompt}, *(
            {"type": "image_url", "image_url": {"url": url}} for url in images)]
        body["messages"] = [{"role": "user", "content": content}]
        body["max_completion_tokens"] = prompt.output_len
    else:
        body["prompt"] = prompt.prompt
    if cfg.stream and cfg.include_usage:
        body["stream_options"] = {"include_usage": True}
        if cfg.continuous_usage:
            body["stream_options"]["continuous_usage_stats"] = True
    if cfg.ignore_eos:
        body["ignore_eos"] = True
    if cfg.min_tokens:
        body["min_tokens"] = prompt.output_len
    body.update(cfg.sampling)
    body.update(cfg.extra_body)
    return _encode(body)


# issue 32: APIs: the bodies of /v1/embeddings and /v1/responses (streamed usage comes with
# response.completed; the embeddings answer is one JSON object).
def _embeddings_body(cfg: RunConfig, model: str, prompt: Prompt) -> dict:
    inputs = list(prompt.prompt) if isinstance(prompt.prompt, tuple) else prompt.prompt
    return {"model": model, "input": inputs, "encoding_format": "float"}


def _responses_body(cfg: RunConfig, model: str, prompt: Prompt) -> dict:
    body = {"model": model, "input": prompt.prompt, "stream": True, "max_output_tokens": prompt.output_len}
    if cfg.ignore_eos:
        body["ignore_eos"] = True
    return body


API_BODIES = {"openai-embeddings": _embeddings_body, "openai-responses": _responses_body}


def turn_body(cfg: RunConfig, first_body: bytes, history: list[tuple[str, str]], user: str,
              output_len: int) -> bytes:
    """A session's next request: the first turn's body with the conversation so far (user turns and
    the server's actual answers) and this turn's output length. Chat sends `messages`; the
    completions backend the turns' texts joined by newlines."""
    body = msgspec.json.decode(first_body)
    if cfg.backend == "openai-chat":
        messages = []
        for asked, answer in history:
            messages += [{"role": "user", "content": asked}, {"role": "assistant", "content": answer}]
        body["messages"] = [*messages, {"role": "user", "content": user}]
    else:
        body["prompt"] = "\n".join([text for pair in history for text in pair] + [user])
    lengths = {"max_tokens": output_len, "max_completion_tokens": output_len, "min_tokens": output_len}
    for key, value in lengths.items():
        if key in body and key not in cfg.extra_body:  # NOTE: --extra-request-body wins, as in request_body
            body[key] = value
    return _encode(body)


@dataclass
class RawResponse:
    """What the read path keeps: stamped chunks, or the error it met."""

    record: RequestRecord
    chunks: list[bytes] = field(default_factory=list)
    stamps: list[int] = field(default_factory=list)
    is_stream: bool = True
    server_timing: bytes | None = None  # the Server-Timing header's value, parsed after the request
    reads: Reads | None = None  # how the lean transport read the body (None: loop stamps per read)
    backend: str = "openai-chat"  # which API's answer this is (set by `Client.send`)
    num_inputs: int = 1  # embeddings: the inputs sent, so as many vectors are due


class Client:
    """A worker's HTTP client: keep-alive pool sized to at least its share of the concurrency.

    Requests are prepared before the run (`prepare`); with the lean transport `send` writes their
    bytes straight through it, skipping httpx's client layers; with `--transport httpx` they go
    through `httpx.AsyncClient.send`. Both speak http:// and https://."""

    def __init__(self, cfg: RunConfig, num_connections: int) -> None:
        self.cfg = cfg
        # NOTE: identity, not httpx's default gzip: each event is stamped as its raw bytes arrive
        # and parsed later, so a compressed stream would be undecodable and its timing meaningless.
        headers = httpx.Headers({"content-type": "application/json", "accept-encoding": "identity"})
        if cfg.server_timing:
            headers["x-server-timing"] = "1"
        headers.update(cfg.headers)  # NOTE: case-insensitive: a --header Accept-Encoding replaces ours
        self.lean: LeanTransport | None = None
        if cfg.effective_transport == "lean":
            transport = self.lean = LeanTransport(max_keepalive=max(num_connections, 1),
                                                  max_body_bytes=cfg.max_response_bytes,
                                                  max_head_bytes=cfg.max_response_header_bytes,
                                                  kernel_stamps=cfg.stamps == "kernel", verify=cfg.tls_verify)
        else:
            httpcore_guards.apply(cfg.max_response_header_bytes)
            limits = httpx.Limits(max_connections=num_connections, max_keepalive_connections=num_connections)
            transport = httpx.AsyncHTTPTransport(limits=limits, retries=0, verify=cfg.tls_verify)
        self.http = httpx.AsyncClient(base_url=cfg.base_url, transport=transport, headers=headers, timeout=None)

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.http.aclose()

    def prepare(self, body: bytes, index: int | None = None, url_index: int = 0) -> httpx.Request | LeanRequest:
        """A reusable request (built before the run: URL merging alone costs about 60 µs in httpx),
        to `cfg.targets[url_index]` (several --base-url).

        With `--request-id-prefix`, it carries `x-request-id: PREFIX<index>` as vLLM's bench sends it."""
        headers = None
        if self.cfg.request_id_prefix is not None and index is not None:
            headers = {"x-request-id": f"{self.cfg.request_id_prefix}{index}"}
        url = self.cfg.endpoint
        if self.cfg.base_urls:
            url = self.cfg.targets[url_index][0].rstrip("/") + self.cfg.endpoint
        request = self.http.build_request("POST", url, content=body, headers=headers)
        return self.lean.prepare(request) if self.lean is not None else request

    async def send(self, request: httpx.Request | LeanRequest, raw: RawResponse, first_token=None,
                   cancel_after_s: float | None = None) -> None:
        """Send one request and keep its stamped bytes in `raw`; never raises for request errors.
        `first_token()`, if given, is called when the first content arrives (--prefill-concurrency);
        with `cancel_after_s`, a request unfinished that long after its send began is dropped (its
        connection closed) and recorded `cancelled` (--request-cancellation-rate)."""
        cfg, rec = self.cfg, raw.record
        raw.backend, raw.num_inputs = cfg.backend, cfg.embedding_batch_size
        rec.request_bytes = _body_bytes(request)
        rec.start_ns = now_ns()
        response = body = None
        cancel = asyncio.timeout(cancel_after_s)
        try:
            async with asyncio.timeout(cfg.timeout_s), cancel:
                status, headers, response, body = await self._open(request)
                if status != 200:
                    text = (await _error_body(response, body))[:300].decode(errors="replace")
                    _fail(rec, f"http_{status}", f"HTTP {status}: {text}")
                    return
                raw.server_timing = _check_headers(headers)
                if body is not None:
                    if first_token is not None:
                        await _until_first_content(body, first_token)
                    await body.complete()
                    raw.chunks, raw.stamps, raw.reads = body.chunks, body.stamps, _reads(body)
                else:
                    await _read_body(response, raw, cfg.max_response_bytes, first_token)
        except ResponseTooLarge as exc:
            _fail(rec, "too_large", str(exc))
        except BadResponse as exc:
            _fail(rec, "bad_response", str(exc))
        except httpx.RemoteProtocolError as exc:
            _fail(rec, *_classify_protocol_error(exc, cfg.max_response_header_bytes))
        except TimeoutError:
            if cancel.expired():
                _fail(rec, CANCELLED, f"cancelled by the client {cancel_after_s:g} s after the send began")
            else:
                _fail(rec, "timeout", f"no complete response within {cfg.timeout_s} s")
        except (httpx.ConnectError, httpx.ReadError, httpx.WriteError) as exc:
            _fail(rec, "connection", describe_error(exc))
        except httpx.TimeoutException as exc:
            _fail(rec, "timeout", f"{type(exc).__name__}: {exc}")
        except Exception as exc:  # noqa: BLE001 - any other failure is counted, never fatal
            _fail(rec, "other", f"{type(exc).__name__}: {exc}")
        finally:
            if rec.error_class is not None:
                raw.chunks, raw.stamps, raw.reads = [], [], None
            # NOTE: the end is the arrival of the last bytes (a kernel stamp where there is one),
            # not the moment the loop got to them.
            rec.end_ns = raw.stamps[-1] if raw.stamps else now_ns()
            if response is not None:
                await response.aclose()
            elif body is not None:
                await body.aclose()  # drops the connection unless the body is complete


    @property
    def stamp_source(self) -> str:
        """Where this client's latencies come from: "kernel", "loop" or "mixed" (`LeanTransport`)."""
        return self.lean.stamp_source if self.lean is not None else "loop"

    async def _open(self, request: httpx.Request | LeanRequest) -> tuple[int, list, httpx.Response | None,
                                                                        StampedBody | None]:
        """Send; the status, the raw headers, and the httpx response (httpx) or the stamped body (lean)."""
        if isinstance(request, LeanRequest):
            status, headers, body = await self.lean.open(request)  # type: ignore[union-attr]
            return status, headers, None, body
        response = await self.http.send(request, stream=True)
        cap = self.cfg.max_response_header_bytes
        # NOTE: h11 bounds only a head that is still incomplete; one that came whole in one read
        # is counted here, as the lean transport counts every head.
        if head_size(response.status_code, response.reason_phrase, response.headers.raw) > cap:
            await response.aclose()
            raise BadResponse(header_cap_message(cap))
        return response.status_code, response.headers.raw, response, None


def _body_bytes(request: httpx.Request | LeanRequest) -> int:
    """The request body's size in bytes (the lean request holds its head too)."""
    if isinstance(request, LeanRequest):
        return len(request.data) - request.data.find(b"\r\n\r\n") - 4
    return len(request.content)


def _reads(body: StampedBody) -> Reads:
    return Reads(body.loop_stamps, body.is_kernel, body.floors)


def _check_headers(headers: list[tuple[bytes, bytes]]) -> bytes | None:
    """The Server-Timing value, if any; BadResponse for a compressed body: loadgen asks for
    identity and never decodes."""
    server_timing = None
    for name, value in headers:
        if len(name) == 16 and name.lower() == b"content-encoding" and value.strip().lower() != b"identity":
            raise BadResponse(f"response has Content-Encoding: {value.decode(errors='replace')[:40]} though "
                              "loadgen asks for identity and reads the raw bytes (no decoding)")
        if len(name) == 13 and name.lower() == b"server-timing":
            server_timing = value
    return server_timing


def describe_error(exc: BaseException) -> str:
    """`Type: message`, the message taken from the cause when the error itself has none.

    httpx's async TLS path raises `ConnectError` with an empty text for a reset handshake."""
    text, cause, names = str(exc), exc, []
    while not text and (cause := cause.__cause__ or cause.__context__) is not None:
        text, names = str(cause), [*names, type(cause).__name__]
    if not text:
        text = f"no detail given ({' <- '.join(names) or 'no cause'}; a reset TLS handshake gives none)"
    return f"{type(exc).__name__}: {text}"


def _classify_protocol_error(exc: httpx.RemoteProtocolError, max_head_bytes: int) -> tuple[str, str]:
    """httpx's protocol errors: a peer that hung up is `connection`; a broken response `bad_response`."""
    text = str(exc)
    if "Receive buffer too long" in text:
        return "bad_response", header_cap_message(max_head_bytes)
    if text.startswith(("peer ", "Server disconnected")):
        return "connection", f"RemoteProtocolError: {text}"
    return "bad_response", f"malformed HTTP response: {text}"


async def _error_body(response: httpx.Response | None, body: StampedBody | None) -> bytes:
    if response is not None:
        return await response.aread()
    await body.complete()  # type: ignore[union-attr]
    return b"".join(body.chunks)  # type: ignore[union-attr]


async def _read_body(response: httpx.Response, raw: RawResponse, max_bytes: int, first_token=None) -> None:
    chunks, stamps, num_bytes = raw.chunks, raw.stamps, 0
    async for data in response.aiter_raw():
        stamp = now_ns()
        num_bytes += len(data)
        if num_bytes > max_bytes:
            raise ResponseTooLarge(too_large_message(max_bytes))
        stamps.append(stamp)
        chunks.append(data)
        if first_token is not None and FIRST_CONTENT.search(data):
            first_token()
            first_token = None


async def _until_first_content(body: StampedBody, first_token) -> None:
    """Read the lean body as it arrives until its first content (then `first_token()`) or its end."""
    async for data in body:
        if FIRST_CONTENT.search(data):
            first_token()
            return


def _parse_responses(raw: RawResponse, tokenizer, want_text: bool, client_delays, rule: str) -> str | None:
    return parse_stream(raw.record, raw.chunks, raw.stamps, tokenizer, want_text, raw.reads, client_delays, rule,
                        decode=decode_responses_stream)


def _parse_embeddings(raw: RawResponse, tokenizer, want_text: bool, client_delays, rule: str) -> None:
    parse_embeddings(raw.record, b"".join(raw.chunks))
    if raw.record.num_embeddings != raw.num_inputs:
        raise MalformedSSE(f"embeddings response holds {raw.record.num_embeddings} vectors for "
                           f"{raw.num_inputs} inputs")


# issue 32: APIs: how each non-chat backend's answer is read.
API_PARSERS = {"openai-responses": _parse_responses, "openai-embeddings": _parse_embeddings}


def _fail(rec: RequestRecord, error_class: str, message: str) -> None:
    if rec.error_class is None:
        rec.error_class, rec.error_message = error_class, message[:500]


def finish_record(raw: RawResponse, tokenizer=None, client_delays: list[int] | None = None,
                  rule: str = "loadgen") -> RequestRecord:
    """Parse the kept bytes into the record (after the request); broken streams become errors.
    `client_delays` gets each kernel-stamped read's loop stamp minus its kernel stamp (ns); `rule`
    says which events are token events (`RunConfig.token_event_rule`)."""
    return finish_with_answer(raw, tokenizer, want_text=False, client_delays=client_delays, rule=rule)[0]


def finish_with_answer(raw: RawResponse, tokenizer=None, want_text: bool = True,
                       client_delays: list[int] | None = None,
                       rule: str = "loadgen") -> tuple[RequestRecord, str | None]:
    """`finish_record`, and the answer's text (None when the request failed or `want_text` is off)."""
    rec, text = raw.record, None
    if rec.error_class is not None:
        return rec, None
    try:
        if raw.backend in API_PARSERS:
            text = API_PARSERS[raw.backend](raw, tokenizer, want_text, client_delays, rule)
        elif raw.is_stream:
            text = parse_stream(rec, raw.chunks, raw.stamps, tokenizer, want_text, raw.reads, client_delays, rule)
        else:
            text = parse_whole(rec, b"".join(raw.chunks), raw.stamps[-1] if raw.stamps else rec.end_ns, tokenizer)
        if raw.server_timing is not None:
            parse_server_timing_header(rec, raw.server_timing)
    except ServerErrorEvent as exc:
        _fail(rec, "server_error_event", str(exc))
    except MalformedSSE as exc:
        _fail(rec, "malformed_sse", str(exc))
    except Exception as exc:  # noqa: BLE001 - one odd response must not take the worker down
        _fail(rec, "other", f"cannot parse the response: {type(exc).__name__}: {exc}")
    raw.chunks, raw.stamps, raw.reads = [], [], None
    return rec, (text if rec.error_class is None else None)
