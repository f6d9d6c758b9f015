"""Volumes: list, get, grow, delete (`app.volumes`).

A volume is named by its owner (`ckpts`), so its name is unique in its account only: every
route reads the caller's volumes, and another account's volume of the same name is a 404 as if
it did not exist. A delete is refused (409) while the caller's own instances name the volume.
"""

from __future__ import annotations

from fastapi import APIRouter

from lowcostgpu.api.context import AccountId, Ctx
from lowcostgpu.api.models_volumes import VolumeOut, VolumeResizeIn

router = APIRouter(prefix="/v1", tags=["volumes"])


@router.get("/volumes")
def list_volumes(ctx: Ctx, account_id: AccountId) -> list[VolumeOut]:
    """The caller's volumes by name, with the instances that use them. Cost: the caller's
    volumes and non-deleted instances (an index of its own rows)."""
    return [VolumeOut.of(v) for v in ctx.plane.volume_service.list(account_id)]


@router.get("/volumes/{volume_name}")
def get_volume(ctx: Ctx, account_id: AccountId, volume_name: str) -> VolumeOut:
    return VolumeOut.of(ctx.plane.volume_service.get(account_id, volume_name))


@router.patch("/volumes/{volume_name}")
def resize_volume(
    ctx: Ctx, account_id: AccountId, volume_name: str, body: VolumeResizeIn
) -> VolumeOut:
    """Grow the volume to `size_gb`: billed at the new size from now on, its limit grown on the
    runtime right after. The same size changes nothing; a smaller one is refused (422)."""
    return VolumeOut.of(ctx.plane.volume_service.resize(account_id, volume_name, body.size_gb))


@router.delete("/volumes/{volume_name}")
def delete_volume(ctx: Ctx, account_id: AccountId, volume_name: str) -> VolumeOut:
    """Delete the volume and its data: storage billing stops now. Refused (409, `details`
    naming them) while any of your instances that is not deleted names it."""
    return VolumeOut.of(ctx.plane.volume_service.delete(account_id, volume_name))
