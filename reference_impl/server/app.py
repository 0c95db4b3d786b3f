"""The FastAPI application: OpenAI routes, health, models, metrics, and OpenAI-style errors."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import time

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Receive, Scope, Send

from reference_impl.config import ServerArgs
from reference_impl.server.connection import (
    CLIENT_CLOSED_REQUEST,
    SSEResponse,
    read_body,
    watch_disconnect,
)
from reference_impl.server.metrics import ServerMetrics
from reference_impl.server.protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    DetokenizeRequest,
    ModelCard,
    ModelList,
    TokenizeRequest,
    count_content_parts,
    error_body,
    validation_error_body,
)
from reference_impl.server.serving import BadRequest
from reference_impl.server.serving_chat import ServingChat
from reference_impl.server.serving_completions import ServingCompletions
from reference_impl.server.serving_tokenization import ServingTokenization
from reference_impl.server.timing import ASK_HEADER, header_value
from reference_impl.server.tokenizer_manager import TokenizerManager

logger = logging.getLogger(__name__)


# NOTE: the ``endpoint`` label of every counted request: a fixed set, so no client can create
# series (a label per unknown path gave one series per random 404).
ENDPOINTS = {"/v1/chat/completions": "chat", "/v1/completions": "completions",
             "/tokenize": "tokenize", "/detokenize": "detokenize"}
OTHER_ENDPOINT = "other"


def create_app(args: ServerArgs, tm: TokenizerManager, tokenizer, metrics: ServerMetrics,
               max_req_kv_tokens: int | None = None) -> FastAPI:
    """The HTTP application of one server; ``max_req_kv_tokens``: the KV tokens one request may
    hold (the scheduler's pool, per DP rank), which bounds the default ``max_tokens``."""
    app = FastAPI(title="reference_impl", openapi_url=None, docs_url=None, redoc_url=None)
    chat = ServingChat(args, tm, tokenizer, metrics)
    completions = ServingCompletions(args, tm, tokenizer, metrics)
    chat.max_req_kv_tokens = completions.max_req_kv_tokens = max_req_kv_tokens
    tokenization = ServingTokenization(args, tokenizer)
    max_body = args.max_request_body_bytes

    @app.api_route("/health", methods=["GET", "HEAD"])
    async def health() -> Response:
        try:
            await tm.get_scheduler_stats(args.health_check_timeout)
        except TimeoutError:
            return JSONResponse(error_body("the scheduler did not answer within "
                                           f"{args.health_check_timeout} s", type="service_unavailable",
                                           code=503), status_code=503)
        return Response(status_code=200)

    @app.api_route("/v1/models", methods=["GET", "HEAD"])
    async def models() -> ModelList:
        return ModelList(data=[ModelCard(id=args.served_model_name, root=args.served_model_name,
                                         max_model_len=args.context_length)])

    @app.api_route("/metrics", methods=["GET", "HEAD"])
    async def prometheus() -> Response:
        try:
            stats = await tm.get_scheduler_stats(args.health_check_timeout)
        except TimeoutError:
            stats = None
        metrics.tracked.set(len(tm.rid_to_state))
        return Response(metrics.render(stats), media_type="text/plain; version=0.0.4")

    @app.options("/health")
    @app.options("/v1/models")
    @app.options("/metrics")
    async def allowed_methods() -> Response:
        return Response(status_code=204, headers={"allow": "GET, HEAD, OPTIONS"})

    async def read_json_body(raw: Request) -> bytes:
        body = await read_body(raw, max_body)
        check_json_content_type(raw.headers.get("content-type", ""))
        return body

    async def read_chat_body(raw: Request) -> bytes:
        body = await read_json_body(raw)
        num_parts = count_content_parts(body, args.max_content_parts)
        if num_parts > args.max_content_parts:
            raise BadRequest(f"The messages and their content parts number at least {num_parts}; "
                             f"the limit is {args.max_content_parts} (--max-content-parts).",
                             param="messages")
        return body

    @app.post("/v1/chat/completions")
    async def chat_completions(raw: Request) -> Response:
        received = time.perf_counter()
        body = await read_chat_body(raw)
        return await _serve(chat, ChatCompletionRequest.model_validate_json(body), raw, received)

    @app.post("/v1/completions")
    async def text_completions(raw: Request) -> Response:
        received = time.perf_counter()
        body = await read_json_body(raw)
        return await _serve(completions, CompletionRequest.model_validate_json(body), raw, received)

    @app.post("/tokenize")
    async def tokenize(raw: Request) -> Response:
        request = TokenizeRequest.model_validate_json(await read_chat_body(raw))
        return JSONResponse(tokenization.tokenize(request).model_dump())

    @app.post("/detokenize")
    async def detokenize(raw: Request) -> Response:
        request = DetokenizeRequest.model_validate_json(await read_json_body(raw))
        return JSONResponse(tokenization.detokenize(request).model_dump())

    _add_error_handlers(app, metrics)
    app.add_middleware(ExpectationCheck)
    if args.api_key is not None:
        app.add_middleware(ApiKeyCheck, api_key=args.api_key, metrics=metrics)
    return app


def check_json_content_type(content_type: str) -> None:
    """A 400 unless the body is declared JSON (a web page can post ``text/plain`` anywhere)."""
    media_type = content_type.split(";", 1)[0].strip().lower()
    if media_type != "application/json":
        raise BadRequest(f"The request body must be JSON (Content-Type: application/json), got "
                         f"{content_type[:100]!r}.", code="unsupported_media_type")


class ExpectationCheck:
    """ASGI middleware: 417 for an ``Expect`` other than ``100-continue`` (uvicorn's part)."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            expect = dict(scope["headers"]).get(b"expect")
            if expect is not None and expect.lower() != b"100-continue":
                body = error_body("Only 'Expect: 100-continue' is supported.", type="expectation_failed",
                                  code=417)
                await JSONResponse(body, status_code=417)(scope, receive, send)
                return
        await self.app(scope, receive, send)


class ApiKeyCheck:
    """ASGI middleware: a 401 for a request to ``/v1/*`` without ``Authorization: Bearer`` and
    the ``--api-key``, as vLLM (OPTIONS, /health, /metrics, /tokenize and /detokenize pass)."""

    def __init__(self, app: ASGIApp, api_key: str, metrics: ServerMetrics):
        self.app = app
        self._key_digest = hashlib.sha256(api_key.encode()).digest()
        self._metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self._needs_key(scope) and not self._has_key(scope):
            self._metrics.requests.labels(ENDPOINTS.get(scope["path"], OTHER_ENDPOINT), "401").inc()
            body = error_body("Incorrect or missing API key: send 'Authorization: Bearer <key>' "
                              "with the server's --api-key.", code="invalid_api_key")
            await JSONResponse(body, status_code=401, headers={"www-authenticate": "Bearer"})(
                scope, receive, send)
            return
        await self.app(scope, receive, send)

    @staticmethod
    def _needs_key(scope: Scope) -> bool:
        path = scope["path"]
        return scope["method"] != "OPTIONS" and (path == "/v1" or path.startswith("/v1/"))

    def _has_key(self, scope: Scope) -> bool:
        value = dict(scope["headers"]).get(b"authorization", b"")
        scheme, _, token = value.partition(b" ")
        # NOTE: digests of equal length, compared in constant time: the key's length leaks nothing.
        return scheme.lower() == b"bearer" and hmac.compare_digest(
            hashlib.sha256(token).digest(), self._key_digest)


async def _serve(serving, request, raw: Request, received: float) -> Response:
    subs = serving.prepare(request)
    headers = raw.headers
    if ASK_HEADER in headers:
        subs.ask_timing(received, headers.get("x-request-id"))
    if request.stream:
        return SSEResponse(serving.stream(request, subs), subs.gone,
                           lambda: serving.record(subs, CLIENT_CLOSED_REQUEST))
    listener = asyncio.create_task(watch_disconnect(raw.receive, subs.gone))
    try:
        response = await serving.complete(request, subs)
    except ConnectionAbortedError:
        logger.info("client disconnected before its %s response; request aborted", serving.endpoint)
        serving.record(subs, CLIENT_CLOSED_REQUEST)
        return Response(status_code=CLIENT_CLOSED_REQUEST)
    finally:
        listener.cancel()
    if subs.timings is None:
        return JSONResponse(response.model_dump())
    subs.first_output = time.perf_counter()
    return JSONResponse(response.model_dump(),
                        headers={"server-timing": header_value(subs.timing_fields())})


def _add_error_handlers(app: FastAPI, metrics: ServerMetrics) -> None:
    def count(raw: Request, status: int) -> None:
        endpoint = ENDPOINTS.get(raw.url.path, OTHER_ENDPOINT)
        metrics.requests.labels(endpoint, str(status)).inc()

    def reply(raw: Request, status: int, body: dict) -> JSONResponse:
        count(raw, status)
        return JSONResponse(body, status_code=status)

    @app.exception_handler(ClientDisconnect)
    async def client_gone(raw: Request, exc: ClientDisconnect) -> Response:
        # NOTE: a body cut short (the client left, or --timeout-request-read closed it) is the
        # client's doing: a 499 logged at info, not a 500 with a traceback.
        logger.info("client disconnected before its request body was complete")
        count(raw, CLIENT_CLOSED_REQUEST)
        return Response(status_code=CLIENT_CLOSED_REQUEST)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(raw: Request, exc: RequestValidationError) -> JSONResponse:
        return reply(raw, 400, validation_error_body(exc))

    @app.exception_handler(ValidationError)
    async def invalid_model(raw: Request, exc: ValidationError) -> JSONResponse:
        return reply(raw, 400, validation_error_body(exc))

    @app.exception_handler(BadRequest)
    async def bad_request(raw: Request, exc: BadRequest) -> JSONResponse:
        return reply(raw, exc.status, error_body(exc.message, type=exc.type, param=exc.param,
                                                 code=exc.code))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(raw: Request, exc: StarletteHTTPException) -> JSONResponse:
        return reply(raw, exc.status_code, error_body(str(exc.detail), code=exc.status_code))

    @app.exception_handler(Exception)
    async def internal_error(raw: Request, exc: Exception) -> JSONResponse:
        logger.exception("internal error")
        return reply(raw, 500, error_body(f"internal error: {exc}", type="internal_server_error",
                                          code=500))

