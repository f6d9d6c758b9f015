"""The HTTP API (FastAPI), versioned under /v1, and the workloads' metadata endpoint.

Every error is JSON with a machine `code` and a human `message` (and a `hint` when there is
something to do); invalid input is a 4xx, never a 500. Every /v1 endpoint but the metadata ones
takes an API key (`Authorization: Bearer KEY`); see `api.context` and docs/api.md.

Routers: `routes_instances`, `routes_billing`, `routes_metadata`, `routes_volumes`, plus any
given to `create_app` (`routers=`) and `lowcostgpu.api.clusters.router` when that module exists
(`mounted_routers`).
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
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from lowcostgpu.api import routes_billing, routes_instances, routes_metadata, routes_volumes
from lowcostgpu.api.body_limit import BodyLimit
from lowcostgpu.api.context import ApiContext
from lowcostgpu.api.metrics import Metrics
from lowcostgpu.api.models_input import ERROR_RESPONSES, MAX_BODY_BYTES
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
CODE_OF_STATUS = {
    400: "bad_request",
    401: "unauthenticated",
    404: "not_found",
    405: "method_not_allowed",
    413: "payload_too_large",
}
PROBLEMS_SHOWN = 5  # of a body's validation problems, the first few (a bad list has many)


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
    api = FastAPI(
        title="lowcostgpu", version="1", openapi_url="/openapi.json", responses=ERROR_RESPONSES
    )
    ctx = ApiContext(
        plane,
        runtime,
        tokens,
        accounts or Accounts(plane.store, plane.clock, plane.ids),
        is_leading,
    )
    api.state.ctx = ctx
    _errors_are_json(api)
    api.state.metrics = metrics = Metrics(ctx)
    _handle_errors(api)

    api.add_middleware(BodyLimit, max_bytes=MAX_BODY_BYTES)
    api.add_middleware(RequestCounter, count=metrics.count_request)  # outermost: counts 413s

    @api.get("/healthz", tags=["service"])
    def healthz() -> dict[str, Any]:
        return {"ok": True, "leading": is_leading()}

    @api.get("/metrics", tags=["service"], response_class=PlainTextResponse)
    def prometheus() -> Response:
        return Response(metrics.render(), media_type="text/plain; version=0.0.4")

    for router in (
        routes_instances.router,
        routes_billing.router,
        routes_metadata.router,
        routes_volumes.router,
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


def _errors_are_json(api: FastAPI) -> None:
    """Error answers are JSON on every route, also where the success is text (logs): FastAPI
    gives a declared error the route's own media type, so the document is set right once."""
    generate = api.openapi

    def openapi() -> dict[str, Any]:
        if api.openapi_schema is None:
            schema = generate()
            error = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorOut"}}}
            for operations in schema.get("paths", {}).values():
                for operation in operations.values():
                    for code in ERROR_RESPONSES:
                        declared = operation.get("responses", {}).get(str(code))
                        if declared is not None:
                            declared["content"] = error
            api.openapi_schema = schema
        return api.openapi_schema

    api.openapi = openapi  # type: ignore[method-assign]


def _handle_errors(api: FastAPI) -> None:
    @api.exception_handler(errors.LowcostgpuError)
    async def our_errors(_: Request, exc: errors.LowcostgpuError) -> JSONResponse:
        return JSONResponse(exc.to_dict(), status_code=status_of(exc))

    @api.exception_handler(RequestValidationError)
    async def bad_input(_: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse(validation_error(exc.errors()), status_code=422)

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


def validation_error(problems: Sequence[Any]) -> dict[str, Any]:
    """FastAPI's validation errors as one readable line: where (`body.env`, `query parameter
    limit`) and what, without Pydantic's `Value error, ` prefixes or the echoed input (which
    may be megabytes, or another tenant's text)."""
    shown = [_problem(p) for p in problems[:PROBLEMS_SHOWN]]
    more = len(problems) - len(shown)
    text = "; ".join(shown) + (f"; and {more} more" if more > 0 else "")
    return {
        "code": "invalid_request",
        "message": f"invalid request: {text}",
        "hint": "see /openapi.json or docs/api.md for the fields each endpoint takes",
    }


def _problem(problem: Any) -> str:
    loc = [str(p) for p in problem.get("loc", ())]
    if problem.get("type") == "json_invalid":
        reason = (problem.get("ctx") or {}).get("error", "JSON decode error")
        return f"body: not valid JSON ({reason} at character {loc[-1] if loc else '?'})"
    where = {"query": "query parameter ", "path": "path parameter ", "header": "header "}
    if loc and loc[0] in where and len(loc) > 1:
        place = where[loc[0]] + ".".join(loc[1:])
    else:
        place = ".".join(loc[1:]) if loc[:1] == ["body"] else ".".join(loc)
    message = str(problem.get("msg", "is not valid")).removeprefix("Value error, ")
    return f"{place or 'body'}: {message}"
