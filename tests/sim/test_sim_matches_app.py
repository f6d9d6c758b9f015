"""The simulator and the real app loop agree: same scenario, same placements, same metered seconds.

The simulator drives `core.engine` on a virtual clock; the server drives it through the control
plane (store, outbox, runtime reports, loop ticks). Played on the same trace, with the app's
workloads doing by hand what the simulator's model does, both must place the same work on the
same GPUs at the same seconds and meter the same GPU-seconds.
"""

from __future__ import annotations

from sim_builders import OD, POOL, job, run

from lowcostgpu.adapters.clock import FixedClock
from lowcostgpu.adapters.fakes import FakeRuntime, FakeVolumes
from lowcostgpu.adapters.files import load_catalog
from lowcostgpu.adapters.store.memory import MemoryStore
from lowcostgpu.app.launch import LaunchRequest
from lowcostgpu.app.plane import PlaneConfig
from lowcostgpu.bootstrap.wiring import wire
from lowcostgpu.core.lifecycle import InstanceState
from lowcostgpu.core.metering import instance_gpu_spans, meter
from lowcostgpu.domain.capacity import Host
from lowcostgpu.domain.events import Reason

END = 5000


class Ids:
    def __init__(self) -> None:
        self.names = iter(["ir", "od"])

    def new_id(self, prefix: str) -> str:
        return next(self.names)


def test_the_simulator_and_the_app_loop_take_the_same_decisions() -> None:
    # A 2-GPU job saving every 100 s of work in 10 s; on-demand work takes its GPUs at 500.
    sim = run([job("ir", 0, 1000, 2, interval=100, cost=10), job("od", 500, 100, 2, OD)])
    app, app_metered = _play_in_the_app()
    assert _runs(sim.instances["ir"]) == [("ir@0", 0, 500), ("ir@610.1", 610, 1200)]
    assert _runs(sim.instances["od"]) == [("od@500", 510, 610)]
    for name in ("ir", "od"):
        assert _runs(app[name]) == _runs(sim.instances[name]), name
        assert app[name].restart_count == sim.instances[name].restart_count
        # The app's meter (records written by its loop) and the simulator's spans agree.
        assert app_metered[name] == _metered(sim.instances[name]), name


def _runs(inst: InstanceState) -> list[tuple[str, int, int | None]]:
    return [(r.allocation_id, r.started_at, r.billed_until) for r in inst.runs]


def _metered(inst: InstanceState) -> int:
    return sum(r.quantity_s for r in meter(instance_gpu_spans(inst), {}, END, 60))


def _play_in_the_app(
    config: PlaneConfig | None = None, store: MemoryStore | None = None
) -> tuple[dict[str, InstanceState], dict[str, int]]:
    clock = FixedClock(0)
    runtime = FakeRuntime(now=clock.now)
    store = store or MemoryStore()
    plane = wire(
        store=store,
        runtime=runtime,
        volumes=FakeVolumes(),
        clock=clock,
        ids=Ids(),
        hosts=[Host("h0", POOL, 2)],
        catalog=load_catalog(),
        secret=b"s" * 32,
        metadata_url="http://127.0.0.1:9/v1/metadata",
        config=config,
    ).plane

    def at(t: int) -> None:
        clock.at = t
        plane.tick()  # take in reports, decide, carry out effects
        plane.tick()  # observe what was just started

    def alloc(name: str) -> str:
        allocation = store.instance(name).state.allocation_id
        assert allocation is not None
        return allocation

    plane.launch(LaunchRequest("sim", "a100-sxm4", "interruptible", 2, command=("ir",)))
    at(0)
    for t, step in ((110, 100), (220, 200), (330, 300), (440, 400)):
        clock.at = t
        plane.report_checkpoint("ir", step)
    clock.at = 500
    plane.launch(LaunchRequest("sim", "a100-sxm4", "on-demand", 2, command=("od",)))
    at(500)  # SIGTERM: it saves for 10 s and leaves
    assert store.instance("ir").state.notice_at == 500
    clock.at = 510
    plane.report_checkpoint("ir", 460)
    runtime.finish(alloc("ir"), 143)
    at(510)
    runtime.finish(alloc("od"), 0)
    at(610)
    for k in range(1, 6):
        clock.at = 610 + 110 * k
        plane.report_checkpoint("ir", 460 + 100 * k)
    clock.at = 1200
    plane.report_complete("ir", 1000)
    runtime.finish(alloc("ir"), 0)
    at(1200)
    at(END)
    reasons = [e.reason for e in store.events() if e.object_id == "ir"]
    assert reasons.count(Reason.PREEMPTED) == 1 and reasons[-1] is Reason.SUCCEEDED
    metered = {
        name: sum(r.quantity_s for r in store.usage() if r.subject_id == name)
        for name in ("ir", "od")
    }
    return {name: store.instance(name).state for name in ("ir", "od")}, metered
