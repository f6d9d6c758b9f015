"""Bodies of the operator's history endpoint (`GET /v1/operator/history`, admin key)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from lowcostgpu.app.fleet_history import FleetHistory
from lowcostgpu.core import fleet_history as fh


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
