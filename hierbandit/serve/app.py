"""The HTTP interface of the decision service: a Starlette (ASGI) application.

==========================  ========================================================
``POST /v1/decide``         ``{"instances": [...], "contexts": [[...], ...],
                            "allowed": [[arm, ...], ...] | null}`` →
                            ``{"events": [...], "arms": [...], "probabilities": [...]}``
``POST /v1/reward``         ``{"events": [...], "rewards": [...]}`` → ``{"applied": n}``
``GET /v1/health``          ``{"status": "ok" | "failed", "reason": ...}`` (503 if failed)
``GET /v1/metrics``         request counts, latency quantiles, counters, last checkpoint
``GET /v1/info``            the policy's class, arm ids, feature names, limits
``GET /v1/state``           the counters a restart restores (decisions, rewards, t, ...)
==========================  ========================================================

Every refusal is a 4xx with ``{"error": message}``: 400 for a malformed body or invalid
values, 404 for an event never issued, 409 for an event already rewarded or expired, 411/413
for a missing or too large body or batch, 415 for a body that is not JSON. Bodies are read up
to ``max_body`` bytes and parsed as strict JSON (no NaN, no repeated keys); nothing in a
request is evaluated or unpickled. The policy's work runs in a worker thread, one request at a
time (:class:`~hierbandit.serve.service.DecisionService` holds the lock).
"""

from __future__ import annotations

import contextlib
from typing import Any

from hierbandit._extras import require
from hierbandit.serve.service import DecisionService, RequestError, loads

__all__ = ["create_app"]

#: default largest body accepted (bytes)
MAX_BODY = 32 * 1024 * 1024


def create_app(service: DecisionService, *, max_body: int = MAX_BODY) -> Any:
    """The ASGI application serving ``service`` (closed when the application shuts down)."""
    applications = require("starlette.applications", "serve", "The decision service")
    responses = require("starlette.responses", "serve", "The decision service")
    routing = require("starlette.routing", "serve", "The decision service")
    to_thread = require("anyio.to_thread", "serve", "The decision service")
    JSONResponse = responses.JSONResponse
    ClientDisconnect = require(
        "starlette.requests", "serve", "The decision service"
    ).ClientDisconnect

    def error(status: int, message: str) -> Any:
        service.metrics.status_seen(status)
        return JSONResponse({"error": message}, status_code=status)

    async def read_json(request: Any) -> Any:
        length = request.headers.get("content-length")
        if length is not None and "transfer-encoding" in request.headers:
            # the two framings disagree on where the body ends (request smuggling through a
            # proxy that reads the other one): refused, as RFC 9112 §6.3 allows
            raise RequestError(
                400, "a request may not carry both Content-Length and Transfer-Encoding"
            )
        if len(request.headers.getlist("content-length")) > 1:
            raise RequestError(400, "Content-Length is given more than once")
        if length is not None:
            if not (length.isascii() and length.isdigit()):  # "²".isdigit() is True
                raise RequestError(400, "Content-Length must be a number of bytes")
            if int(length) > max_body:
                raise RequestError(413, f"the body may hold at most {max_body} bytes")
        ctype = request.headers.get("content-type", "application/json").split(";")[0].strip()
        if ctype != "application/json":
            raise RequestError(415, f"the body must be application/json, got {ctype!r:.60}")
        chunks, size = [], 0
        try:
            async for chunk in request.stream():
                size += len(chunk)
                if size > max_body:
                    raise RequestError(413, f"the body may hold at most {max_body} bytes")
                chunks.append(chunk)
        except ClientDisconnect:
            # the body ended early: the client went away, or the HTTP server found its framing
            # broken halfway (a bad chunk size); nothing was applied, and the answer (if it
            # can still be sent) says why
            raise RequestError(400, "the body ended before it was complete") from None
        body = b"".join(chunks)
        if not body:
            raise RequestError(400, "the body is empty; expected a JSON object")
        try:
            return loads(body.decode("utf-8"))
        except UnicodeDecodeError:
            raise RequestError(400, "the body is not UTF-8") from None
        except RecursionError:
            raise RequestError(400, "the body nests too deeply") from None
        except ValueError as exc:
            raise RequestError(400, f"the body is not valid JSON ({exc})") from None

    def endpoint(method: Any) -> Any:
        async def handle(request: Any) -> Any:
            try:
                body = await read_json(request)
                result = await to_thread.run_sync(method, body)
            except RequestError as exc:
                return error(exc.status, exc.message)
            service.metrics.status_seen(200)
            return JSONResponse(result)

        return handle

    async def health(request: Any) -> Any:
        h = service.health()
        return JSONResponse(h, status_code=200 if h["status"] == "ok" else 503)

    async def metrics(request: Any) -> Any:
        return JSONResponse(await to_thread.run_sync(service.metrics_report))

    async def info(request: Any) -> Any:
        return JSONResponse(service.info())

    async def state(request: Any) -> Any:
        return JSONResponse(await to_thread.run_sync(service.state))

    async def not_found(request: Any, exc: Any) -> Any:
        return error(getattr(exc, "status_code", 404), getattr(exc, "detail", "not found"))

    routes = [
        routing.Route("/v1/decide", endpoint(service.decide), methods=["POST"]),
        routing.Route("/v1/reward", endpoint(service.reward), methods=["POST"]),
        routing.Route("/v1/health", health, methods=["GET"]),
        routing.Route("/v1/metrics", metrics, methods=["GET"]),
        routing.Route("/v1/info", info, methods=["GET"]),
        routing.Route("/v1/state", state, methods=["GET"]),
    ]

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> Any:
        yield
        await to_thread.run_sync(service.close)

    exceptions = require("starlette.exceptions", "serve", "The decision service")
    app = applications.Starlette(
        routes=routes,
        lifespan=lifespan,
        exception_handlers={exceptions.HTTPException: not_found},
    )
    # /v1/decide/ is an unknown path (404), not a 307 redirect to /v1/decide
    app.router.redirect_slashes = False
    return app
