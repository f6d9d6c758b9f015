"""A launch request as a user states it, checked and turned into what the engine and store take."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from lowcostgpu.core.engine import LaunchSpec
from lowcostgpu.domain.capacity import CapacityClass, Host, PoolKey
from lowcostgpu.domain.catalog import Catalog
from lowcostgpu.domain.errors import InvalidRequest, NotFound
from lowcostgpu.domain.volumes import parse_volume_spec
from lowcostgpu.ports.runtime import Volumes
from lowcostgpu.ports.store_records import LaunchRecord
from lowcostgpu.templates.registry import UnknownTemplate, command_for

ENV_PREFIX_RESERVED = "LOWCOSTGPU_"


@dataclass(frozen=True, slots=True)
class LaunchRequest:
    account_id: str
    gpu_type: str
    type: str = "interruptible"
    gpus: int = 1
    region: str | None = None
    template: str | None = None
    command: Sequence[str] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    volume: str | None = None  # NAME:SIZE, e.g. ckpts:50GB; NAME: the existing volume
    auto_requeue: bool = True
    grace_period_s: int = 300
    nodes: int = 1  # hosts, `gpus` GPUs each: a multi-node instance is placed on all at once
    hold_survivors_s: int = 0  # a reclaimed multi-node instance keeps its other hosts this long


def build_launch(
    request: LaunchRequest,
    instance_id: str,
    catalog: Catalog,
    pools: FleetPools,
    volumes: Volumes | None = None,
) -> tuple[LaunchSpec, LaunchRecord]:
    """`volumes`: where a new volume must fit (the runtime's answer), checked before anything is
    written, so that a volume no disk here can hold is a 400 now, not a failing effect later."""
    gpu_type = catalog.resolve_gpu(request.gpu_type).name  # `a100` → a100-sxm4, or a clear error
    capacity_class = CapacityClass.parse(request.type)
    pool = pools.pool(gpu_type, request.region)
    argv = _argv(request)
    reserved = sorted(k for k in request.env if k.startswith(ENV_PREFIX_RESERVED))
    if reserved:
        raise InvalidRequest(
            f"environment variables {', '.join(reserved)} are set by lowcostgpu",
            hint="remove them from env; names starting with LOWCOSTGPU_ are reserved",
        )
    volume = parse_volume_spec(request.volume) if request.volume else None
    if volume is not None and volumes is not None:  # an existing one too: in which region?
        volumes.check_fits(request.account_id, volume.name, volume.size_gb, region=pool.region)
    spec = LaunchSpec(
        instance_id=instance_id,
        pool=pool,
        gpus=request.gpus,
        capacity_class=capacity_class,
        account_id=request.account_id,
        auto_requeue=request.auto_requeue,
        grace_period_s=request.grace_period_s,
        nodes=request.nodes,
        hold_survivors_s=request.hold_survivors_s,
    )
    record = LaunchRecord(
        instance_id=instance_id,
        account_id=request.account_id,
        argv=tuple(argv),
        env=dict(request.env),
        template=request.template,
        volume_name=volume.name if volume else None,
        volume_size_gb=volume.size_gb if volume else None,
    )
    return spec, record


class FleetPools:
    """Which regions have which GPU type: computed once from the fleet, so that resolving a
    request's pool costs O(regions of its type), not a scan of every host."""

    def __init__(self, hosts: Iterable[Host]) -> None:
        regions: dict[str, set[str]] = {}
        sizes: dict[PoolKey, set[int]] = {}
        for h in hosts:
            regions.setdefault(h.pool.gpu_type, set()).add(h.pool.region)
            sizes.setdefault(h.pool, set()).add(h.gpu_count)
        self._regions = {gpu_type: sorted(r) for gpu_type, r in regions.items()}
        self._sizes = {pool: tuple(sorted(s)) for pool, s in sizes.items()}

    def host_sizes(self, pool: PoolKey) -> tuple[int, ...]:
        """The GPU counts of the pool's hosts, smallest first."""
        return self._sizes.get(pool, ())

    def pool(self, gpu_type: str, region: str | None) -> PoolKey:
        """The pool a request for `gpu_type` (in `region`, or the first region that has it)
        goes to; NotFound says what the fleet has instead."""
        regions = self._regions.get(gpu_type, [])
        if not regions:
            raise NotFound(
                f"this fleet has no {gpu_type} GPUs",
                hint="see `lowcostgpu fleet` for the GPU types and regions it has",
            )
        if region is None:
            return PoolKey(regions[0], gpu_type)
        if region not in regions:
            raise NotFound(
                f"no {gpu_type} GPUs in region {region}",
                hint=f"{gpu_type} is available in: {', '.join(regions)}",
            )
        return PoolKey(region, gpu_type)


def _argv(request: LaunchRequest) -> list[str]:
    if request.template and request.template != "shell":
        try:
            return command_for(request.template, list(request.command))
        except UnknownTemplate as exc:
            raise InvalidRequest(str(exc.args[0]), hint="see `lowcostgpu templates`") from None
    if not request.command:
        raise InvalidRequest(
            "nothing to run: give a template or a command",
            hint="e.g. --template pytorch, or -- python train.py",
        )
    return list(request.command)
