"""A cluster on the real control plane with the Slurm runtime and Slurm nodes (the session's lab):
an on-demand launch reclaims the preemptible node (DRAIN with our reason, the Preempted event,
SIGTERM to the customer's job; at the deadline SIGKILL and requeue; the host leaves the cluster
and runs the on-demand work), and the cluster refills toward its target when capacity frees."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from slurm_world import PlaneWorld

from lowcostgpu.adapters.slurm.partitions import FEATURE
from lowcostgpu.domain.status import InstanceStatus, NodeStatus
from waiting import wait_until


@pytest.fixture
def world(tmp_path: Path) -> Iterator[PlaneWorld]:
    w = PlaneWorld(tmp_path)
    yield w
    w.cleanup()


def test_an_on_demand_launch_reclaims_a_preemptible_node_and_the_cluster_refills(
    world: PlaneWorld,
) -> None:
    world.create_cluster(grace_s=3)
    world.tick_until(lambda: len(world.live_nodes("preemptible")) == 1, what="nodes ready")
    (node,) = world.live_nodes("preemptible")
    (standard,) = world.live_nodes("standard")
    host = node.host_id
    assert host is not None and FEATURE in world.node_info(host).features
    assert world.standard_partition in world.node_info(str(standard.host_id)).partitions
    job = world.submit("train", ignore_term=True)  # saves nothing: it needs the deadline's kill
    wait_until(job.running, what="the customer's job running")
    assert job.fields()["NodeList"] == host

    reclaimed_at = time.monotonic()
    od = world.on_demand((sys.executable, "-c", "import time; time.sleep(3600)"))
    world.plane.tick()
    info = world.node_info(host)
    assert "drain" in info.state and info.reason.startswith("lowcostgpu: preempted, deadline=")
    preempted = world.store.events(object_kind="node", object_id=node.id, reason="Preempted")
    assert len(preempted) == 1 and od not in preempted[0].message
    wait_until(lambda: sorted(job.terms()) == ["batch", "step"], what="SIGTERM to step and batch")
    assert world.plane.clusters.get_cluster(world.cluster_id).allocated_preemptible_gpus == 0

    world.tick_until(lambda: job.restarts == 1, what="the job killed at the deadline, requeued")
    requeued_s = time.monotonic() - reclaimed_at
    assert requeued_s >= 2  # not before the deadline (3 s on a clock of whole seconds)
    assert job.state == "PENDING"  # it waits for a node of the cluster's partition
    world.tick_until(
        lambda: world.store.instance(od).state.status is InstanceStatus.RUNNING,
        what="the on-demand work running on the reclaimed host",
    )
    after = world.node_info(host)
    assert world.preemptible_partition not in after.partitions and FEATURE not in after.features
    gone = next(n.state for n in world.store.nodes(include_removed=True) if n.state.id == node.id)
    assert gone.status is NodeStatus.REMOVED
    print(f"\nreclaim -> requeued at the deadline (grace 3 s): {requeued_s:.1f} s")

    world.plane.stop(od)  # capacity comes back: a replacement node joins the same partition
    freed_at = time.monotonic()
    world.tick_until(
        lambda: world.plane.clusters.get_cluster(world.cluster_id).allocated_preemptible_gpus == 4,
        what="the refill",
    )
    (replacement,) = world.live_nodes("preemptible")
    assert replacement.id != node.id
    world.tick_until(
        lambda: world.preemptible_partition in world.node_info(host).partitions,
        what="the replacement in the partition",
    )
    print(f"stop -> replacement node in the partition: {time.monotonic() - freed_at:.1f} s")
    assert job.state == "PENDING"  # Slurm holds a requeued job cred_expire + 1 s (121 s)
