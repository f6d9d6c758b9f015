"""The workloads' metadata endpoint (DESIGN.md §1), opened by the instance's own token."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response

from lowcostgpu.api.context import Ctx, InstanceToken
from lowcostgpu.api.models import CheckpointIn, CompleteIn
from lowcostgpu.app import queries
from lowcostgpu.core.risk import risk_answer

router = APIRouter(prefix="/v1/metadata", tags=["metadata"])


@router.get("/interruption")
def interruption(ctx: Ctx, instance_id: InstanceToken) -> Response:
    """The notice (`{"action": "stop", ...}`) once there is one; before it, for an instance
    among the next victims, the advice `{"action": "none", "risk": "next", "risk_since"}`
    (`core.risk`: save a checkpoint now); else 404, as before warnings existed."""
    notice = ctx.plane.interruption(instance_id)
    if notice is None:
        state = ctx.plane.snapshot()
        notice = risk_answer(state.risk, state.instances.get(instance_id))
    if notice is None:
        body = {"code": "not_found", "message": "no interruption notice"}
        return JSONResponse(body, status_code=404)
    return JSONResponse(notice)


@router.post("/checkpoint", status_code=204)
def checkpoint(ctx: Ctx, body: CheckpointIn, instance_id: InstanceToken) -> Response:
    ctx.plane.report_checkpoint(
        instance_id, body.step, save_s=body.whole_save_s, saves_on_notice=body.saves_on_notice
    )
    return Response(status_code=204)


@router.post("/complete", status_code=204)
def complete(ctx: Ctx, body: CompleteIn, instance_id: InstanceToken) -> Response:
    ctx.plane.report_complete(instance_id, body.step)
    return Response(status_code=204)


@router.get("/fleet")
def fleet(ctx: Ctx, instance_id: InstanceToken) -> dict[str, Any]:
    """How often this workload's GPU type is interrupted (`queries.interruption_statistics`):
    for an adaptive checkpoint interval."""
    return queries.instance_interruption_statistics(ctx.plane, instance_id)
