"""The bodies of /v1/volumes: a volume as its owner sees it, and a resize."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, StrictInt

from lowcostgpu.app.volumes import VolumeView
from lowcostgpu.domain.volumes import MAX_SIZE_GB


class VolumeOut(BaseModel):
    name: str
    size_gb: int
    created_at: int
    resized_at: int | None = Field(description="the last resize; null if it never was")
    in_use_by: list[str] = Field(
        description="your instances (not deleted) that name it: it cannot be deleted meanwhile"
    )
    checkpoint_step: int | None = Field(
        description="the last checkpoint step a run on it reported: a run attached to it "
        "resumes from there; null if none is known"
    )

    @classmethod
    def of(cls, v: VolumeView) -> VolumeOut:
        return cls(
            name=v.name,
            size_gb=v.size_gb,
            created_at=v.created_at,
            resized_at=v.resized_at,
            in_use_by=list(v.in_use_by),
            checkpoint_step=v.checkpoint_step,
        )


class VolumeResizeIn(BaseModel):
    """A grow: the new size in GB (a whole number; smaller than now is refused)."""

    model_config = ConfigDict(extra="forbid")

    size_gb: StrictInt = Field(ge=1, le=MAX_SIZE_GB, description="the new size, in GB")
