"""The FastAPI application: OpenAI routes, health, models, metrics, and OpenAI-style errors."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from reference_impl.config import ServerArgs
from reference_impl.server.metrics import ServerMetrics
from reference_impl.server.protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    ModelCard,
    ModelList,
    error_body,
)
from reference_impl.server.serving import BadRequest
from reference_impl.server.serving_chat import ServingChat
from reference_impl.server.serving_completions import ServingCompletions
from reference_impl.server.tokenizer_manager import TokenizerManager

logger = logging.getLogger(__name__)


def create_app(args: ServerArgs, tm: TokenizerManager, tokenizer, metrics: ServerMetrics) -> FastAPI:
    """The HTTP application of one server."""
    app = FastAPI(title="reference_impl", openapi_url=None, docs_url=None, redoc_url=None)
    chat = ServingChat(args, tm, tokenizer, metrics)
    completions = ServingCompletions(args, tm, tokenizer, metrics)

    @app.get("/health")
    async def health() -> Response:
        return Response(status_code=200)

    @app.get("/v1/models")
    async def models() -> ModelList:
        return ModelList(data=[ModelCard(id=args.served_model_name, root=args.served_model_name,
                                         max_model_len=args.context_length)])

    @app.get("/metrics")
    async def prometheus() -> Response:
        try:
            stats = await tm.get_scheduler_stats()
        except TimeoutError:
            stats = None
        return Response(metrics.render(stats), media_type="text/plain; version=0.0.4")

    @app.post("/v1/chat/completions")
    async def chat_completions(request: ChatCompletionRequest, raw: Request) -> Response:
        return await _serve(chat, request, raw)

    @app.post("/v1/completions")
    async def text_completions(request: CompletionRequest, raw: Request) -> Response:
        return await _serve(completions, request, raw)

    _add_error_handlers(app, metrics)
    return app


async def _serve(serving, request, raw: Request) -> Response:
    subs = serving.prepare(request)
    if request.stream:
        return StreamingResponse(serving.stream(request, subs), media_type="text/event-stream")
    response = await serving.complete(request, subs, raw.is_disconnected)
    return JSONResponse(response.model_dump())


def _add_error_handlers(app: FastAPI, metrics: ServerMetrics) -> None:
    def reply(raw: Request, status: int, body: dict) -> JSONResponse:
        endpoint = raw.url.path.rsplit("/", 1)[-1]
        metrics.requests.labels(endpoint, str(status)).inc()
        return JSONResponse(body, status_code=status)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(raw: Request, exc: RequestValidationError) -> JSONResponse:
        return reply(raw, 400, _validation_body(exc.errors()))

    @app.exception_handler(ValidationError)
    async def invalid_model(raw: Request, exc: ValidationError) -> JSONResponse:
        return reply(raw, 400, _validation_body(exc.errors(include_url=False)))

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


def _validation_body(errors) -> dict:
    parts, param = [], None
    for err in errors:
        loc = [str(p) for p in err.get("loc", ()) if p != "body"]
        param = param or (loc[0] if loc else None)
        parts.append(f"{'.'.join(loc) or 'body'}: {err.get('msg')}")
    return error_body("; ".join(parts) or "invalid request", param=param)
