"""Bodies of the operator's history and reclaims endpoints (`GET /v1/operator/history`,
`GET /v1/operator/reclaims`, admin key)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from lowcostgpu.app.fleet_history import FleetHistory
from lowcostgpu.core import fleet_history as fh
from lowcostgpu.ports.records import EventRecord


class HistoryWindowOut(BaseModel):
    start: int = Field(description="first bucket's start (Unix seconds)")
    end: int = Field(description="last bucket's end; the last bucket holds now")
    step_s: int


class LevelOut(BaseModel):
    queue_depth: int = Field(description="instances and preemptible nodes waiting as it closes")
    queue_depth_peak: int = Field(description="the most waiting at any instant of the bucket")
    reclaims: int = Field(description="Preempted events (instances and nodes) in the bucket")
    reclaims_per_hour: float

    @classmethod
    def of(cls, level: fh.Level, step_s: int) -> LevelOut:
        return cls(
            queue_depth=level.depth,
            queue_depth_peak=level.peak,
            reclaims=level.reclaims,
            reclaims_per_hour=round(fh.per_hour(level.reclaims, step_s), 4),
        )


class HistoryPointOut(LevelOut):
    start: int
    pools: dict[str, LevelOut] = Field(description="the same per pool (region/gpu_type)")


class HistoryOut(BaseModel):
    now: int
    window: HistoryWindowOut
    pools: list[str] = Field(description="the fleet's pools, region/gpu_type")
    queue_depth_now: int
    reclaims_window: int
    events_read: int = Field(description="events the answer was computed from (its cost)")
    lookback_s: int = Field(description="how far before the window older events were read")
    series: list[HistoryPointOut]

    @classmethod
    def of(cls, h: FleetHistory) -> HistoryOut:
        step = h.window.step_s
        series = [
            HistoryPointOut(
                start=p.start,
                **LevelOut.of(p.total, step).model_dump(),
                pools={name: LevelOut.of(level, step) for name, level in p.pools.items()},
            )
            for p in h.points
        ]
        return cls(
            now=h.now,
            window=HistoryWindowOut(start=h.window.start, end=h.window.end, step_s=step),
            pools=h.pools,
            queue_depth_now=h.points[-1].total.depth if h.points else 0,
            reclaims_window=sum(p.total.reclaims for p in h.points),
            events_read=h.events_read,
            lookback_s=h.lookback_s,
            series=series,
        )


class ReclaimOut(BaseModel):
    """One reclaim as the operator sees it: whose object, what its owner was told, and why the
    victim policy chose it (`data.reason`, `data.policy` of the `Preempted` event)."""

    seq: int
    at: int = Field(description="the notice (Unix seconds)")
    account_id: str
    object_kind: str = Field(description="instance or node")
    object_id: str
    message: str = Field(description="what the customer was told")
    grace_period_s: int | None
    lost_gpu_s: int | None = Field(description="GPU-seconds since its last checkpoint")
    reason: str = Field(description="the victim policy's reasoning, in words")
    policy: dict[str, Any] = Field(description="the same as figures: name, cost, alternatives")

    @classmethod
    def of(cls, e: EventRecord) -> ReclaimOut:
        data = e.data
        return cls(
            seq=e.seq or 0,
            at=e.at,
            account_id=e.account_id,
            object_kind=e.object_kind,
            object_id=e.object_id,
            message=e.message,
            grace_period_s=data.get("grace_period_s"),
            lost_gpu_s=data.get("lost_gpu_s"),
            reason=str(data.get("reason") or ""),
            policy=dict(data.get("policy") or {}),
        )
