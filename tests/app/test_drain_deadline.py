"""A drain's grace counts from the SIGTERM really sent: an effect carried out late (a slow
commit, a loaded machine, a retry) moves the SIGKILL to sent + grace, and the GPUs go to the
on-demand request that reclaimed them only then (or when the workload exits)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from plane_world import World

from lowcostgpu.app.clusters import ClusterRequest
from lowcostgpu.app.effects import Outcome
from lowcostgpu.app.launch import LaunchRequest
from lowcostgpu.domain.events import Reason
from lowcostgpu.domain.status import InstanceStatus, NodeStatus
from lowcostgpu.ports.store_records import Commit, OutboxEntry

_I = InstanceStatus
GRACE = 30


class Drain:
    """An interruptible instance running on all 8 GPUs, reclaimed by an on-demand launch whose
    SIGTERM is carried out `late_s` after the decision (the clock moves before it is sent)."""

    def __init__(self, late_s: int, world: World | None = None) -> None:
        self.w = w = world or World()
        req = LaunchRequest(
            "acme", "a100-sxm4", "interruptible", 8, command=("train",), grace_period_s=GRACE
        )
        self.victim_id = w.plane.launch(req).state.id
        w.tick()
        w.tick(10)
        self.alloc = w.allocation(self.victim_id)
        self.signals: list[OutboxEntry] = []
        run = w.plane.outbox._carry_out

        def late(entries: Sequence[OutboxEntry]) -> Outcome:
            signals = [e for e in entries if e.kind == "SignalWorkload"]
            if signals:
                self.signals.extend(signals)
                w.clock.advance(late_s)
            return run(entries)

        w.plane.outbox._carry_out = late
        self.decided_at = w.clock.now()
        od = LaunchRequest("acme", "a100-sxm4", "on-demand", 8, command=("serve",))
        self.od_id = w.plane.launch(od).state.id
        self.sent_at = self.decided_at + late_s

    def deadline(self) -> int | None:
        return self.w.store.instance(self.victim_id).state.deadline

    def killed(self) -> bool:
        return any(
            e.reason is Reason.KILLED and e.object_id == self.victim_id
            for e in self.w.store.events()
        )


@pytest.mark.parametrize("late_s", [1, 7, 45])
@pytest.mark.parametrize(("offset_s", "killed"), [(-1, False), (0, True)])
def test_a_sigterm_sent_late_is_followed_by_sigkill_at_sent_plus_grace_and_not_before(
    late_s: int, offset_s: int, killed: bool
) -> None:
    d = Drain(late_s)
    assert d.w.runtime.signals_of(d.alloc) == ["SIGTERM"]
    assert d.deadline() == d.sent_at + GRACE
    assert d.w.plane.interruption(d.victim_id) == {
        "action": "stop",
        "notice_at": d.decided_at,
        "deadline": d.sent_at + GRACE,
    }
    d.w.clock.at = d.sent_at + GRACE + offset_s
    d.w.plane.tick()
    assert d.killed() is killed
    assert (d.alloc not in d.w.runtime.running()) is killed
    d.w.plane.tick()
    od = d.w.store.instance(d.od_id).state.status
    assert od is (_I.RUNNING if killed else _I.STARTING)  # the GPUs go to it only then


def test_the_preempted_event_says_the_decisions_deadline_and_the_kill_the_real_one() -> None:
    d = Drain(7)
    d.w.clock.at = d.sent_at + GRACE
    d.w.plane.tick()
    data = {e.reason: e.data for e in d.w.store.events() if e.object_id == d.victim_id}
    assert data[Reason.PREEMPTED]["deadline"] == d.decided_at + GRACE
    assert data[Reason.KILLED]["deadline"] == d.sent_at + GRACE


def test_a_workload_that_exits_in_its_grace_frees_the_gpus_then() -> None:
    d = Drain(7)
    d.w.runtime.finish(d.alloc, 0)
    d.w.tick(1)
    assert d.w.store.instance(d.victim_id).state.status is _I.QUEUED
    d.w.tick(0)
    assert d.w.store.instance(d.od_id).state.status is _I.RUNNING


def test_a_replayed_signal_does_not_extend_the_deadline_again() -> None:
    d = Drain(5)
    stamped = d.deadline()
    d.w.clock.advance(20)
    d.w.plane.outbox.run_entries(d.signals)  # again (a crash before it was marked done)
    assert d.w.runtime.signals_of(d.alloc) == ["SIGTERM", "SIGTERM"]
    assert d.deadline() == stamped == d.sent_at + GRACE


def test_a_stamp_that_is_lost_leaves_the_decisions_deadline() -> None:
    w = World()
    commit = w.store.commit

    def lose_stamps(c: Commit) -> None:
        if any(i.state.signal_sent_at is not None for i in c.instances):
            raise OSError("the server died between the signal and its stamp")
        commit(c)

    w.store.commit = lose_stamps  # type: ignore[method-assign]
    d = Drain(9, w)
    assert d.w.runtime.signals_of(d.alloc) == ["SIGTERM"]
    assert d.deadline() == d.decided_at + GRACE
    d.w.clock.at = d.decided_at + GRACE
    d.w.plane.tick()
    assert d.killed()


@pytest.mark.parametrize(("offset_s", "removed"), [(-1, False), (0, True)])
def test_a_cluster_node_drained_late_is_removed_at_its_pods_sigterm_plus_grace(
    offset_s: int, removed: bool
) -> None:
    w = World()
    request = ClusterRequest("acme", "a100-sxm4", 4, 1, 4, grace_period_s=GRACE)
    c = w.plane.clusters.create_cluster(request).cluster.id
    w.tick()
    (victim,) = [n.id for n in w.plane.clusters.get_cluster(c).nodes if n.preemptible]
    run = w.plane.outbox._carry_out

    def late(entries: Sequence[OutboxEntry]) -> Outcome:
        if any(e.kind == "SignalWorkload" for e in entries):
            w.clock.advance(11)
        return run(entries)

    w.plane.outbox._carry_out = late
    decided = w.clock.now()
    w.plane.launch(LaunchRequest("acme", "a100-sxm4", "on-demand", 4, command=("serve",)))
    (node,) = [n.state for n in w.store.nodes(include_removed=True) if n.state.id == victim]
    assert (node.status, node.deadline) == (NodeStatus.CORDONED, decided + 11 + GRACE)
    w.clock.at = decided + 11 + GRACE + offset_s
    w.plane.tick()
    (node,) = [n.state for n in w.store.nodes(include_removed=True) if n.state.id == victim]
    assert (node.status is NodeStatus.REMOVED) is removed
