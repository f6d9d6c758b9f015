"""The HTTP API (FastAPI), versioned under /v1, and the workloads' metadata endpoint.

Every error is JSON with a machine `code` and a human `message` (and a `hint` when there is
something to do); invalid input is a 4xx, never a 500. Every /v1 endpoint but the metadata ones
takes an API key (`Authorization: Bearer KEY`); see `api.context` and docs/api.md.

Routers: `routes_instances`, `routes_billing`, `routes_metadata`, plus any given to `create_app`
(`routers=`) and `lowcostgpu.api.clusters.router` when that module exists (`mounted_routers`).
A router takes what it needs from `api.context` (`Ctx`, `AccountId`, `Admin`, `owned_instance`).
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
from collections.abc import Callable, Sequence
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from lowcostgpu.api import routes_billing, routes_instances, routes_metadata
from lowcostgpu.api.context import ApiContext
from lowcostgpu.api.metrics import Metrics
from lowcostgpu.app.accounts import Accounts
from lowcostgpu.app.plane import ControlPlane
from lowcostgpu.app.tokens import Tokens
from lowcostgpu.domain import errors
from lowcostgpu.ports.runtime import Runtime

log = logging.getLogger(__name__)
# mounted when the module exists
OPTIONAL_ROUTERS = (
    "lowcostgpu.api.clusters",
    "lowcostgpu.api.routes_events",
    "lowcostgpu.api.routes_webhooks",
    "lowcostgpu.api.routes_operator",
    "lowcostgpu.console.web",
)

STATUS_OF: list[tuple[type[errors.LowcostgpuError], int]] = [
    (errors.NotFound, 404),
    (errors.Unauthenticated, 401),
    (errors.Forbidden, 403),
    (errors.PaymentRequired, 402),
    (errors.InsufficientCapacity, 409),
    (errors.Conflict, 409),
    (errors.InvalidRequest, 422),
    (errors.Unavailable, 503),
]
CODE_OF_STATUS = {404: "not_found", 405: "method_not_allowed", 401: "unauthenticated"}


def status_of(exc: errors.LowcostgpuError) -> int:
    return next((code for kind, code in STATUS_OF if isinstance(exc, kind)), 500)


def mounted_routers() -> list[APIRouter]:
    """Routers of optional modules that exist in this build (each exports `router`)."""
    found = []
    for name in OPTIONAL_ROUTERS:
        if importlib.util.find_spec(name) is not None:
            found.append(importlib.import_module(name).router)
    return found


def create_app(
    plane: ControlPlane,
    runtime: Runtime,
    tokens: Tokens,
    is_leading: Callable[[], bool],
    *,
    accounts: Accounts | None = None,
    routers: Sequence[APIRouter] = (),
) -> FastAPI:
    api = FastAPI(title="lowcostgpu", version="1", openapi_url="/openapi.json")
    ctx = ApiContext(
        plane,
        runtime,
        tokens,
        accounts or Accounts(plane.store, plane.clock, plane.ids),
        is_leading,
    )
    api.state.ctx = ctx
    api.state.metrics = metrics = Metrics(ctx)
    _handle_errors(api)

    api.add_middleware(RequestCounter, count=metrics.count_request)

    @api.get("/healthz", tags=["service"])
    def healthz() -> dict[str, Any]:
        return {"ok": True, "leading": is_leading()}

    @api.get("/metrics", tags=["service"])
    def prometheus() -> Response:
        return Response(metrics.render(), media_type="text/plain; version=0.0.4")

    for router in (
        routes_instances.router,
        routes_billing.router,
        routes_metadata.router,
        *routers,
        *mounted_routers(),
    ):
        api.include_router(router)
    return api


class RequestCounter:
    """Counts requests by method and status, as a plain ASGI middleware: Starlette's
    `BaseHTTPMiddleware` (what `@app.middleware("http")` builds) wraps every response in a
    stream and cost more than a launch's decision here (bench/plane.py --http)."""

    def __init__(self, app: ASGIApp, count: Callable[[str, int], None]) -> None:
        self.app = app
        self.count = count

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500  # what the client gets if no response starts

        async def sent(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, sent)
        finally:
            self.count(str(scope["method"]), status)


def _handle_errors(api: FastAPI) -> None:
    @api.exception_handler(errors.LowcostgpuError)
    async def our_errors(_: Request, exc: errors.LowcostgpuError) -> JSONResponse:
        return JSONResponse(exc.to_dict(), status_code=status_of(exc))

    @api.exception_handler(RequestValidationError)
    async def bad_input(_: Request, exc: RequestValidationError) -> JSONResponse:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'][1:]) or 'body'}: {e['msg']}" for e in exc.errors()
        )
        body = {
            "code": "invalid_request",
            "message": f"invalid request: {problems}",
            "hint": "see /openapi.json or docs/api.md for the fields each endpoint takes",
        }
        return JSONResponse(body, status_code=422)

    @api.exception_handler(HTTPException)
    async def http_errors(request: Request, exc: HTTPException) -> JSONResponse:
        code = CODE_OF_STATUS.get(exc.status_code, "http_error")
        body = {"code": code, "message": f"{request.method} {request.url.path}: {exc.detail}"}
        if exc.status_code == 404:
            body["hint"] = "see /openapi.json for the endpoints"
        return JSONResponse(body, status_code=exc.status_code, headers=exc.headers)

    @api.exception_handler(Exception)
    async def unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error")
        body = {
            "code": "internal",
            "message": f"internal error: {type(exc).__name__}",
            "hint": "this is a bug; the server log has the details",
        }
        return JSONResponse(body, status_code=500)
