"""The control plane on fakes: decisions are written before they are acted on, and survive."""

from __future__ import annotations

import pytest
from plane_world import World

from lowcostgpu.app.effects import Outcome
from lowcostgpu.app.launch import LaunchRequest
from lowcostgpu.domain.errors import InsufficientCapacity, InvalidRequest, NotFound, Unavailable
from lowcostgpu.domain.events import Reason
from lowcostgpu.domain.status import InstanceStatus

_I = InstanceStatus


def interruptible(gpus: int = 8, **kw: object) -> LaunchRequest:
    return LaunchRequest("acme", "a100-sxm4", "interruptible", gpus, command=("train",), **kw)  # type: ignore[arg-type]


def on_demand(gpus: int = 8) -> LaunchRequest:
    return LaunchRequest("acme", "a100-sxm4", "on-demand", gpus, command=("serve",))


def reasons(world: World, instance_id: str) -> list[Reason]:
    return [e.reason for e in world.store.events() if e.object_id == instance_id]


def test_launch_is_written_then_started_right_after_its_commit_with_the_workload_env() -> None:
    w = World()
    inst = w.plane.launch(interruptible(volume="ckpts:50GB"))
    assert inst.state.status is _I.STARTING
    # carried out by the request itself, after its commit: not left for the loop's next tick
    assert w.runtime.running() == [w.allocation(inst.state.id)]
    assert w.store.pending_outbox() == []
    start = w.runtime.started(w.allocation(inst.state.id))
    assert start.env["LOWCOSTGPU_INSTANCE_ID"] == inst.state.id
    assert start.env["LOWCOSTGPU_RESTART_COUNT"] == "0"
    assert start.env["LOWCOSTGPU_GRACE_PERIOD_S"] == "300"
    token = start.env["LOWCOSTGPU_TOKEN"]
    claim = w.wired.tokens.verify(token)
    assert (claim.instance_id, claim.allocation_id) == (inst.state.id, inst.state.allocation_id)
    assert start.volume is not None and start.volume.name == "ckpts"
    w.tick(1)
    assert w.store.instance(inst.state.id).state.status is _I.RUNNING


def test_reclaim_drain_requeue_and_resume_through_the_loop() -> None:
    w = World()
    i = w.plane.launch(interruptible()).state.id
    w.tick()
    w.tick(10)
    w.plane.report_checkpoint(i, 4200)
    first = w.allocation(i)
    od = w.plane.launch(on_demand()).state.id
    w.tick(1)
    assert w.runtime.signals_of(first) == ["SIGTERM"]
    assert w.plane.interruption(i) is not None
    w.runtime.finish(first, 0)  # checkpointed and left within its grace period
    w.tick(5)
    assert w.store.instance(i).state.status is _I.QUEUED
    w.tick(1)
    assert w.store.instance(od).state.status is _I.RUNNING
    w.runtime.finish(w.allocation(od), 0)
    w.tick(60)
    w.tick(1)
    second = w.store.instance(i).state
    assert second.status is _I.RUNNING and second.restart_count == 1
    assert w.runtime.started(second.allocation_id or "").env["LOWCOSTGPU_RESTART_COUNT"] == "1"
    assert {Reason.PREEMPTED, Reason.INTERRUPTED, Reason.REQUEUED, Reason.RESTARTED} <= set(
        reasons(w, i)
    )


def test_sigkill_at_the_deadline_is_carried_out_by_a_loop_that_restarted() -> None:
    w = World()
    i = w.plane.launch(interruptible()).state.id
    w.tick()
    w.tick(10)
    w.plane.launch(on_demand())
    w.tick(1)
    victim = w.allocation(i)
    restarted = World(store=w.store)  # a new server on the same store, same runtime
    restarted.runtime = w.runtime
    restarted.wired.runner.runtime = w.runtime
    restarted.plane.runtime = w.runtime
    deadline = w.store.instance(i).state.deadline
    assert deadline is not None
    restarted.clock.at = deadline - 1
    restarted.plane.tick()
    assert w.runtime.signals_of(victim) == ["SIGTERM"]  # one second before: not yet
    restarted.clock.advance(1)
    restarted.plane.tick()
    assert Reason.KILLED in reasons(w, i)
    assert victim not in w.runtime.running()
    restarted.plane.tick()  # the on-demand request, which waited for the victim, starts
    assert [a.split("@")[0] for a in w.runtime.running()] == ["i-0002"]


def test_an_effect_pending_after_a_crash_is_carried_out_once() -> None:
    w = World()
    carry_out = w.plane.outbox._carry_out
    w.plane.outbox._carry_out = lambda entries: Outcome()  # the server dies after the commit
    i = w.plane.launch(interruptible()).state.id
    w.plane.outbox._carry_out = carry_out
    pending = w.store.pending_outbox()
    assert [e.kind for e in pending] == ["StartWorkload"]
    w.wired.runner.run(pending)  # carried out, then the server died before marking it done
    w.plane.run_outbox()  # carried out again before its start was seen: nothing starts twice
    assert w.runtime.start_calls(w.allocation(i)) == 2
    assert w.runtime.running() == [w.allocation(i)]
    assert w.store.pending_outbox() == []


def test_a_command_that_cannot_start_fails_the_instance_and_frees_its_gpus() -> None:
    w = World()
    w.runtime = type(w.runtime)(now=w.clock.now, missing_commands=["nope"])
    w.wired.runner.runtime = w.runtime
    w.plane.runtime = w.runtime
    bad = w.plane.launch(LaunchRequest("acme", "a100-sxm4", command=("nope",), gpus=8)).state.id
    w.tick()
    w.tick(1)
    failed = w.store.instance(bad).state
    assert failed.status is _I.FAILED and "no such file" in (failed.failure_reason or "")
    good = w.plane.launch(interruptible()).state.id
    assert w.store.instance(good).state.status is _I.STARTING


def test_orphaned_workloads_are_killed() -> None:
    w = World()
    i = w.plane.launch(interruptible()).state.id
    w.tick()
    w.plane.stop(i)
    w.tick(1)
    w.tick(301)  # killed at the deadline, then forgotten
    assert w.runtime.running() == []
    assert w.store.instance(i).state.status is _I.STOPPED


@pytest.mark.parametrize(
    ("request_", "error"),
    [
        (LaunchRequest("a", "h200", command=("x",)), NotFound),
        (LaunchRequest("a", "a100-sxm4", region="mars", command=("x",)), NotFound),
        (LaunchRequest("a", "a100-sxm4"), InvalidRequest),
        (LaunchRequest("a", "a100-sxm4", template="nope"), InvalidRequest),
        (LaunchRequest("a", "a100-sxm4", command=("x",), volume="ckpts"), InvalidRequest),
        (
            LaunchRequest("a", "a100-sxm4", command=("x",), env={"LOWCOSTGPU_TOKEN": "x"}),
            InvalidRequest,
        ),
        (LaunchRequest("a", "a100-sxm4", command=("x",), type="spot-auction"), InvalidRequest),
        (LaunchRequest("a", "a100-sxm4", command=("x",), gpus=9), InvalidRequest),
    ],
)
def test_bad_launches_are_refused_and_write_nothing(
    request_: LaunchRequest, error: type[Exception]
) -> None:
    w = World()
    with pytest.raises(error):
        w.plane.launch(request_)
    assert w.store.instances() == [] and w.store.pending_outbox() == []


def test_on_demand_without_capacity_is_refused() -> None:
    w = World()
    w.plane.launch(on_demand())
    with pytest.raises(InsufficientCapacity):
        w.plane.launch(on_demand(1))


@pytest.mark.parametrize(("freed_after_s", "queue_takes_them"), [(119, False), (120, True)])
def test_gpus_that_free_after_an_on_demand_refusal_wait_for_its_retry(
    freed_after_s: int, queue_takes_them: bool
) -> None:
    """The default hold is 120 s: within it the retry gets the GPUs at once, with no victim
    started only to be drained; after it the queue gets them."""
    w = World()
    first = w.plane.launch(on_demand()).state.id
    w.tick()
    queued = w.plane.launch(interruptible()).state.id
    with pytest.raises(InsufficientCapacity):
        w.plane.launch(on_demand())
    w.clock.advance(freed_after_s)
    w.runtime.finish(w.allocation(first), 0)
    w.tick()
    status = w.store.instance(queued).state.status
    assert (status is _I.STARTING) is queue_takes_them
    if not queue_takes_them:
        assert status is _I.QUEUED
        retry = w.plane.launch(on_demand()).state
        assert retry.status is _I.STARTING and retry.waiting_for == frozenset()


def test_a_standby_server_decides_nothing() -> None:
    w = World()
    w.plane.standby = True
    with pytest.raises(Unavailable, match="standby"):
        w.plane.launch(interruptible())
    assert w.store.instances() == []


def test_a_volume_made_at_launch_is_recorded_as_an_event_once() -> None:
    w = World()
    w.plane.launch(interruptible(gpus=1, volume="ckpts:50GB"))
    w.plane.launch(interruptible(gpus=1, volume="ckpts:50GB"))  # the same volume: no new event
    created = [e for e in w.store.events() if e.reason is Reason.VOLUME_CREATED]
    assert [(e.object_kind, e.object_id, e.data["size_gb"]) for e in created] == [
        ("volume", "ckpts", 50)
    ]


def test_the_on_demand_hold_lasts_until_every_refused_customer_has_had_their_retry() -> None:
    """Two customers refused: the first one's placement must not hand the next host to the
    queue, whose run the second customer's retry would reclaim at once."""
    w = World(gpus=[4, 4])

    def od(account: str) -> LaunchRequest:
        return LaunchRequest(account, "a100-sxm4", "on-demand", 4, command=("serve",))

    first, second = (w.plane.launch(od("a")).state.id for _ in range(2))
    queued = w.plane.launch(
        LaunchRequest("q", "a100-sxm4", "interruptible", 4, command=("train",))
    ).state.id
    for account in ("b", "c"):
        with pytest.raises(InsufficientCapacity):
            w.plane.launch(od(account))
    w.tick(1)

    def end(instance_id: str) -> None:
        w.plane.stop(instance_id)
        w.runtime.finish(w.allocation(instance_id), 0)
        w.tick(1)

    end(first)
    assert w.store.instance(queued).state.status is _I.QUEUED  # held for b and c
    w.plane.launch(od("b"))
    end(second)
    assert w.store.instance(queued).state.status is _I.QUEUED  # still held: c has not come back
    c = w.plane.launch(od("c")).state.id
    assert w.store.instance(c).state.status is _I.STARTING  # placed at once, nothing reclaimed
    assert w.runtime.signals_of(w.allocation(c)) == []
