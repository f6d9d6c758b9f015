"""A control plane on in-memory fakes and a clock the test moves: the app layer, no I/O."""

from __future__ import annotations

from lowcostgpu.adapters.clock import FixedClock
from lowcostgpu.adapters.fakes import FakeRuntime, FakeVolumes
from lowcostgpu.adapters.files import load_catalog
from lowcostgpu.adapters.store.memory import MemoryStore
from lowcostgpu.app.plane import ControlPlane, PlaneConfig
from lowcostgpu.bootstrap.wiring import Wired, wire
from lowcostgpu.core.scheduler import SchedulerConfig
from lowcostgpu.domain.capacity import Host, PoolKey
from lowcostgpu.ports.nodes import NodeProvider
from lowcostgpu.ports.store import Store

POOL = PoolKey("eu-west", "a100-sxm4")


class CountingIds:
    def __init__(self) -> None:
        self.n = 0

    def new_id(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}-{self.n:04d}"


class World:
    def __init__(
        self,
        store: Store | None = None,
        gpus: int | list[int] = 8,
        nodes: NodeProvider | None = None,
    ) -> None:
        sizes = [gpus] if isinstance(gpus, int) else gpus  # one host h1, or h1, h2, … of sizes
        self.clock = FixedClock(1_000_000)
        self.store = store or MemoryStore()
        self.runtime = FakeRuntime(now=self.clock.now)
        self.volumes = FakeVolumes()
        self.wired: Wired = wire(
            store=self.store,
            runtime=self.runtime,
            volumes=self.volumes,
            clock=self.clock,
            ids=CountingIds(),
            hosts=[Host(f"h{n}", POOL, size) for n, size in enumerate(sizes, 1)],
            catalog=load_catalog(),
            secret=b"0123456789abcdef0123456789abcdef",
            metadata_url="http://127.0.0.1:9/v1/metadata",
            config=PlaneConfig(scheduler=SchedulerConfig(min_runtime_s=0)),
            nodes=nodes,
        )

    @property
    def plane(self) -> ControlPlane:
        return self.wired.plane

    def tick(self, advance_s: int = 0) -> None:
        self.clock.advance(advance_s)
        self.plane.tick()

    def allocation(self, instance_id: str) -> str:
        alloc = self.store.instance(instance_id).state.allocation_id
        assert alloc is not None
        return alloc
