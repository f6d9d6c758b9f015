"""The HTTP API (FastAPI), versioned under /v1, and the workloads' metadata endpoint.

Every error is JSON with a machine `code` and a human `message` (and a `hint` when there is
something to do); invalid input is a 4xx, never a 500.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Header, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from lowcostgpu.api.models import (
    CheckpointIn,
    CompleteIn,
    EventOut,
    InstanceIn,
    InstanceOut,
    UsageOut,
)
from lowcostgpu.app.launch import LaunchRequest
from lowcostgpu.app.plane import ControlPlane
from lowcostgpu.app.tokens import Tokens
from lowcostgpu.domain import errors
from lowcostgpu.ports.runtime import Runtime

DEFAULT_ACCOUNT = "default"

STATUS_OF: list[tuple[type[errors.LowcostgpuError], int]] = [
    (errors.NotFound, 404),
    (errors.Unauthenticated, 401),
    (errors.PaymentRequired, 402),
    (errors.InsufficientCapacity, 409),
    (errors.Conflict, 409),
    (errors.InvalidRequest, 422),
    (errors.Unavailable, 503),
]


def status_of(exc: errors.LowcostgpuError) -> int:
    return next((code for kind, code in STATUS_OF if isinstance(exc, kind)), 500)


def create_app(
    plane: ControlPlane, runtime: Runtime, tokens: Tokens, is_leading: Callable[[], bool]
) -> FastAPI:
    api = FastAPI(title="lowcostgpu", version="1", openapi_url="/openapi.json")

    @api.exception_handler(errors.LowcostgpuError)
    async def our_errors(_: Request, exc: errors.LowcostgpuError) -> JSONResponse:
        return JSONResponse(exc.to_dict(), status_code=status_of(exc))

    @api.exception_handler(RequestValidationError)
    async def bad_input(_: Request, exc: RequestValidationError) -> JSONResponse:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'][1:]) or 'body'}: {e['msg']}" for e in exc.errors()
        )
        body = {"code": "invalid_request", "message": f"invalid request: {problems}"}
        return JSONResponse(body, status_code=422)

    def instance_of_token(authorization: Annotated[str | None, Header()] = None) -> str:
        if not authorization or not authorization.startswith("Bearer "):
            raise errors.Unauthenticated(
                "missing instance token",
                hint="send Authorization: Bearer $LOWCOSTGPU_TOKEN",
            )
        return tokens.verify(authorization.removeprefix("Bearer ").strip())

    Token = Annotated[str, Depends(instance_of_token)]

    @api.get("/healthz")
    def healthz() -> dict[str, Any]:
        return {"ok": True, "leading": is_leading()}

    @api.post("/v1/instances", status_code=201)
    def launch(body: InstanceIn) -> InstanceOut:
        request = LaunchRequest(
            account_id=DEFAULT_ACCOUNT,
            gpu_type=body.gpu,
            type=body.type,
            gpus=body.gpus,
            region=body.region,
            template=body.template,
            command=tuple(body.command),
            env=body.env,
            volume=body.volume,
            auto_requeue=body.auto_requeue,
            grace_period_s=body.grace_period_s,
        )
        return InstanceOut.of(plane, plane.launch(request))

    @api.get("/v1/instances")
    def list_instances() -> list[InstanceOut]:
        return [InstanceOut.of(plane, s) for s in plane.store.instances()]

    @api.get("/v1/instances/{instance_id}")
    def get_instance(instance_id: str) -> InstanceOut:
        return InstanceOut.of(plane, plane.store.instance(instance_id))

    @api.post("/v1/instances/{instance_id}/stop")
    def stop(instance_id: str) -> InstanceOut:
        return InstanceOut.of(plane, plane.stop(instance_id))

    @api.post("/v1/instances/{instance_id}/resume")
    def resume(instance_id: str) -> InstanceOut:
        return InstanceOut.of(plane, plane.resume(instance_id))

    @api.delete("/v1/instances/{instance_id}")
    def delete(instance_id: str) -> InstanceOut:
        return InstanceOut.of(plane, plane.delete(instance_id))

    @api.get("/v1/instances/{instance_id}/logs", response_class=PlainTextResponse)
    def logs(instance_id: str, tail_bytes: Annotated[int, Query(ge=1, le=2**24)] = 65536) -> str:
        state = plane.store.instance(instance_id).state
        runs = [r.allocation_id for r in state.runs]
        if state.allocation_id and state.allocation_id not in runs:
            runs.append(state.allocation_id)
        return "".join(runtime.logs(a, tail_bytes) for a in runs[-1:])

    @api.get("/v1/instances/{instance_id}/usage")
    def usage(instance_id: str) -> UsageOut:
        plane.store.instance(instance_id)
        return UsageOut.of(instance_id, plane)

    @api.get("/v1/events")
    def events(
        after: Annotated[int, Query(ge=0)] = 0,
        limit: Annotated[int, Query(ge=1, le=1000)] = 200,
    ) -> list[EventOut]:
        return [EventOut.of(e) for e in plane.store.events(after_seq=after, limit=limit)]

    # The workloads' metadata endpoint (DESIGN.md §1), opened by the instance's own token.

    @api.get("/v1/metadata/interruption")
    def interruption(instance_id: Token) -> Response:
        notice = plane.interruption(instance_id)
        if notice is None:
            body = {"code": "not_found", "message": "no interruption notice"}
            return JSONResponse(body, status_code=404)
        return JSONResponse(notice)

    @api.post("/v1/metadata/checkpoint", status_code=204)
    def checkpoint(body: CheckpointIn, instance_id: Token) -> Response:
        plane.report_checkpoint(instance_id, body.step)
        return Response(status_code=204)

    @api.post("/v1/metadata/complete", status_code=204)
    def complete(body: CompleteIn, instance_id: Token) -> Response:
        plane.report_complete(instance_id, body.step)
        return Response(status_code=204)

    @api.get("/v1/metadata/fleet")
    def fleet(instance_id: Token) -> dict[str, Any]:
        return plane.interruption_statistics(instance_id)

    return api
