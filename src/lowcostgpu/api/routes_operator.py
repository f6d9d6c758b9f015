"""The operator's view of the fleet (admin key only): what the console's Fleet page plots.

`GET /v1/operator/fleet` — pools now (GPUs, free, on-demand vs interruptible, queue depth), the
interruption statistics per GPU type, and per time bucket of a window: GPU-seconds on-demand vs
interruptible and the utilisation they make, reclaims, revenue. `GET /v1/operator/history` —
queue depth and reclaims per step of a window, per pool, derived from the event log (so it
survives a restart). `GET /v1/operator/reclaims` — the latest reclaims (`Preempted` events of
every account) with the victim policy's reasoning, which the customer's message leaves out.
Aggregates, accounts' totals and the operator's own view; an account key gets 403 like every
admin endpoint.
"""

from __future__ import annotations

from dataclasses import asdict
from fractions import Fraction
from typing import Annotated, Any

from fastapi import APIRouter, Query

from lowcostgpu.api.context import Admin, Ctx
from lowcostgpu.api.models_input import MAX_INT64
from lowcostgpu.api.models_operator import HistoryOut, ReclaimOut
from lowcostgpu.app import fleet_history, queries
from lowcostgpu.app import operator_stats as stats
from lowcostgpu.app.plane import ControlPlane
from lowcostgpu.domain.events import Reason

router = APIRouter(prefix="/v1/operator", tags=["admin"])


def _pools(plane: ControlPlane) -> list[dict[str, Any]]:
    """The pools now; of the GPUs held (instances and nodes alike), those cluster nodes hold."""
    nodes = stats.node_gpus(plane)
    out = []
    for pool in queries.pools(plane):
        row = asdict(pool)
        held = nodes.get((pool.region, pool.gpu_type), {"standard": 0, "preemptible": 0})
        row["node_standard_gpus"] = held["standard"]
        row["node_preemptible_gpus"] = held["preemptible"]
        out.append(row)
    return out


@router.get("/fleet")
def operator_fleet(
    ctx: Ctx,
    _: Admin,
    window_s: Annotated[int, Query(ge=60, le=90 * 86400, description="how far back")] = 86400,
    bucket_s: Annotated[int, Query(ge=60, le=90 * 86400, description="one point per")] = 3600,
) -> dict[str, Any]:
    """Pools, interruptions per GPU type, and the fleet over time (utilisation, reclaims,
    revenue per bucket); amounts are decimal strings."""
    plane = ctx.plane
    window = stats.Window.ending(plane.clock.now(), window_s, bucket_s)
    gpus = stats.fleet_gpus(plane)
    capacity_s = max(1, gpus * bucket_s)
    buckets = stats.series(plane, window)
    return {
        "now": plane.clock.now(),
        "window": {"start": window.start, "end": window.end, "bucket_s": bucket_s},
        "gpus": gpus,
        "accounts": len(plane.store.accounts()),
        "instances": stats.instance_counts(plane),
        "pools": _pools(plane),
        "interruptions": queries.interruption_statistics(plane),
        "revenue_total": stats.shown(stats.revenue_total(plane)),
        "revenue_window": stats.shown(sum((b.revenue for b in buckets), Fraction(0))),
        "reclaims_window": sum(b.reclaims for b in buckets),
        "series": [
            {
                "start": b.start,
                "on_demand_gpu_s": round(b.on_demand_gpu_s, 3),
                "interruptible_gpu_s": round(b.interruptible_gpu_s, 3),
                "utilisation_on_demand": round(b.on_demand_gpu_s / capacity_s, 4),
                "utilisation_interruptible": round(b.interruptible_gpu_s / capacity_s, 4),
                "reclaims": b.reclaims,
                "revenue": stats.shown(b.revenue),
            }
            for b in buckets
        ],
    }


@router.get("/history", response_model=HistoryOut)
def operator_history(
    ctx: Ctx,
    _: Admin,
    window_s: Annotated[
        int, Query(le=MAX_INT64, description="how far back, seconds (60 … 90 days)")
    ] = 86400,
    step_s: Annotated[
        int, Query(le=MAX_INT64, description="one point per, seconds (at least 60)")
    ] = 3600,
) -> HistoryOut:
    """Queue depth (closing and peak; instances and preemptible nodes waiting) and reclaims
    (`Preempted` events) per step of the window, per pool and in all, from the event log.
    A window that makes no plot is a 422 that says what to change."""
    return HistoryOut.of(fleet_history.fleet_history(ctx.plane, window_s, step_s))


@router.get("/reclaims", response_model=list[ReclaimOut])
def operator_reclaims(
    ctx: Ctx,
    _: Admin,
    limit: Annotated[int, Query(ge=1, le=1000, description="the latest N reclaims")] = 50,
) -> list[ReclaimOut]:
    """The latest reclaims of every account, oldest first: the victim, what its owner was told,
    and why the victim policy chose it. Cost: one store read by reason (the last `limit`)."""
    found = ctx.plane.store.events(reason=str(Reason.PREEMPTED), limit=limit, newest=True)
    return [ReclaimOut.of(e) for e in found]
