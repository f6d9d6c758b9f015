"""Cluster nodes on a real Slurm (the session's lab): a node is a whole Slurm node in its
cluster's partition; its drain is a Slurm DRAIN with our reason, SIGTERM to each customer job's
step and batch shell, the node's allocation `exited` once the jobs left; at the deadline what
still runs is killed and requeued; removal gives the host back to the pool. Every effect may be
carried out twice, and a restarted provider continues a drain."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from slurm_world import NodesWorld

from lowcostgpu.adapters.slurm.node_records import Drain, NodeRecord, NodeRecords
from lowcostgpu.adapters.slurm.nodes import SlurmNodes
from lowcostgpu.adapters.slurm.partitions import FEATURE, drain_reason
from lowcostgpu.domain.errors import InvalidRequest
from waiting import wait_until

HOST, OTHER = "node1", "node2"


@pytest.fixture
def world(tmp_path: Path) -> Iterator[NodesWorld]:
    w = NodesWorld(tmp_path)
    yield w
    w.cleanup()


def _deadline(seconds: int = 60) -> int:
    return int(time.time()) + seconds


def test_an_added_node_joins_its_partition_marked_preemptible_and_runs_a_customers_job(
    world: NodesWorld,
) -> None:
    node = world.node(HOST)
    world.add(node)
    info = world.node_info(HOST)
    assert world.preemptible_partition in info.partitions
    assert "lowcostgpu" in " ".join(info.partitions)  # still in the pool's partition too
    assert FEATURE in info.features
    assert world.report(node).phase == "running"
    job = world.submit("train")
    wait_until(job.running, what="the customer's job running")
    assert job.fields()["NodeList"] == HOST


def test_a_standard_node_joins_the_standard_partition_without_the_feature(
    world: NodesWorld,
) -> None:
    world.add(world.node(OTHER, preemptible=False))
    info = world.node_info(OTHER)
    assert world.standard_partition in info.partitions
    assert world.preemptible_partition not in info.partitions
    assert FEATURE not in info.features


def test_a_node_smaller_than_its_host_is_refused_with_what_to_do(world: NodesWorld) -> None:
    node = world.node(HOST, gpus=2)
    with pytest.raises(InvalidRequest) as refused:
        world.add(node)
    assert "whole host" in str(refused.value) and "gpus_per_node 4" in (refused.value.hint or "")
    assert world.preemptible_partition not in world.node_info(HOST).partitions
    assert world.nodes.records.all() == []


def test_the_drain_marks_the_node_sends_sigterm_to_step_and_batch_and_ends_once_jobs_left(
    world: NodesWorld,
) -> None:
    node = world.node(HOST)
    world.add(node)
    job = world.submit("train", exit_code=0)  # saves at SIGTERM and exits 0
    wait_until(job.running, what="the customer's job running")
    world.cordon(node, _deadline())
    info = world.node_info(HOST)
    assert "drain" in info.state and info.reason.startswith("lowcostgpu: preempted, deadline=20")
    assert world.report(node).phase == "running"  # the job still runs: the drain goes on
    assert node.allocation_id is not None
    world.nodes.signal(node.allocation_id)
    wait_until(lambda: sorted(job.terms()) == ["batch", "step"], what="SIGTERM to step and batch")
    exited = wait_until(
        lambda: (r := world.report(node)) is not None and r.phase == "exited" and r,
        what="the node's allocation exited",
    )
    assert exited.exit_code == 0 and "0 job(s) requeued" in exited.reason
    assert job.state == "COMPLETED" and job.restarts == 0  # it finished: never requeued


def test_without_signal_batch_only_the_steps_get_sigterm(world: NodesWorld) -> None:
    world.nodes = SlurmNodes(world.slurm, world.store, world.root / "nodes", signal_batch=False)
    node = world.node(HOST)
    world.add(node)
    job = world.submit("train")
    wait_until(job.running, what="the customer's job running")
    world.cordon(node, _deadline())
    assert node.allocation_id is not None
    world.nodes.signal(node.allocation_id)
    wait_until(lambda: (r := world.report(node)) is not None and r.phase == "exited")
    assert job.terms() == ["step"] and job.state == "COMPLETED"


def test_a_job_that_fails_inside_its_grace_is_requeued_and_one_that_was_cancelled_is_not(
    world: NodesWorld,
) -> None:
    node = world.node(HOST)
    world.add(node)
    failing = world.submit("failing", exit_code=3)
    cancelled = world.submit("cancelled")
    wait_until(lambda: failing.running() and cancelled.running(), what="both jobs running")
    world.cordon(node, _deadline())
    world.slurm.cancel(cancelled.job_id)  # its owner's scancel after the notice
    wait_until(lambda: cancelled.state == "CANCELLED", what="the owner's cancel")
    assert node.allocation_id is not None
    world.nodes.signal(node.allocation_id)
    wait_until(lambda: (r := world.report(node)) is not None and r.phase == "exited")
    assert failing.restarts == 1 and failing.state == "PENDING"  # waits for another node
    assert cancelled.state == "CANCELLED" and cancelled.restarts == 0


def test_at_the_deadline_what_still_runs_is_killed_and_requeued(world: NodesWorld) -> None:
    node = world.node(HOST)
    world.add(node)
    stubborn = world.submit("stubborn", ignore_term=True)
    opted_out = world.submit("opted-out", ignore_term=True, requeue="--no-requeue")
    wait_until(lambda: stubborn.running() and opted_out.running(), what="both jobs running")
    world.cordon(node, _deadline(2))
    assert node.allocation_id is not None
    world.nodes.signal(node.allocation_id)
    wait_until(lambda: "step" in stubborn.terms(), what="the stubborn job's SIGTERM")
    report = world.report(node)
    assert report.phase == "running" and "2 job(s) left" in report.reason
    world.nodes.kill(node.allocation_id)
    wait_until(lambda: stubborn.state == "PENDING", what="the killed job requeued")
    assert stubborn.restarts == 1
    wait_until(lambda: opted_out.state not in ("RUNNING", "COMPLETING"), what="opted-out ended")
    assert opted_out.restarts == 0  # submitted --no-requeue: left ended
    assert world.report(node).phase == "exited"


def test_an_interactive_job_gets_sigterm_to_its_step_and_is_left_ended_at_the_deadline(
    world: NodesWorld,
) -> None:
    node = world.node(HOST)
    world.add(node)
    marks = world.jobs_dir / "interactive"
    marks.mkdir()
    step = f"trap 'echo step >> {marks}/term' TERM; echo up > {marks}/running; sleep 600 & wait"
    env = {**os.environ, "SLURM_CONF": str(world.lab.conf)}
    argv = ["srun", f"--partition={world.preemptible_partition}", "bash", "-c", step]
    srun = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until((marks / "running").exists, what="the interactive step running")
        world.cordon(node, _deadline(2))
        assert node.allocation_id is not None
        world.nodes.signal(node.allocation_id)  # no batch shell: its step alone gets it
        wait_until((marks / "term").exists, what="the step's SIGTERM")
        world.nodes.kill(node.allocation_id)  # Slurm requeues batch jobs only
        assert srun.wait(timeout=60) != 0
        assert world.report(node).phase == "exited"
    finally:
        srun.kill()
        srun.wait()


def test_remove_gives_the_host_back_to_the_pool_and_keeps_the_partition_empty(
    world: NodesWorld,
) -> None:
    node = world.node(HOST)
    world.add(node)
    world.cordon(node, _deadline())
    world.remove(node)
    info = world.node_info(HOST)
    assert world.preemptible_partition not in info.partitions
    assert FEATURE not in info.features
    assert "drain" not in info.state and info.reason == ""
    assert world.nodes.records.all() == [] and world.report(node) is None
    assert world.preemptible_partition in world.slurm.partitions()  # kept, empty
    job = world.submit("waits")  # a customer may still submit: it waits for a node
    wait_until(lambda: job.fields().get("Reason") == "PartitionConfig", what="job pending")
    assert job.state == "PENDING"


def test_every_effect_carried_out_twice_is_harmless(world: NodesWorld) -> None:
    node = world.node(HOST)
    assert node.allocation_id is not None
    added = world.add(node)
    world.again(added)
    assert world.node_info(HOST).features.count(FEATURE) == 1
    job = world.submit("train", ignore_term=True)
    wait_until(job.running, what="the customer's job running")
    cordoned = world.cordon(node, _deadline(2))
    world.again(cordoned)
    world.nodes.signal(node.allocation_id)
    world.nodes.signal(node.allocation_id)
    wait_until(lambda: "step" in job.terms(), what="the job's SIGTERM")
    world.nodes.kill(node.allocation_id)
    world.nodes.kill(node.allocation_id)
    wait_until(lambda: job.state == "PENDING", what="the killed job requeued")
    world.nodes.kill(node.allocation_id)
    removed = world.remove(node)
    world.again(removed)
    world.again(added)  # a late replay of the add: the node is gone for good
    assert sorted(job.terms()) == ["batch", "step"]  # one SIGTERM each, however often signalled
    assert job.restarts == 1  # requeued once
    assert world.preemptible_partition not in world.node_info(HOST).partitions


def test_a_restarted_provider_continues_the_drain(world: NodesWorld) -> None:
    node = world.node(HOST)
    world.add(node)
    job = world.submit("train", exit_code=3)
    wait_until(job.running, what="the customer's job running")
    world.cordon(node, _deadline())
    assert node.allocation_id is not None
    world.nodes.signal(node.allocation_id)
    restarted = world.provider()  # the control plane restarted: only the records are left
    assert restarted.owns(node.allocation_id)
    restarted.signal(node.allocation_id)  # the outbox replays the SIGTERM: not sent again
    exited = wait_until(
        lambda: (r := world.report(node, restarted)) is not None and r.phase == "exited" and r,
        what="the drain ended under the new provider",
    )
    assert "1 job(s) requeued" in exited.reason and job.restarts == 1
    assert sorted(job.terms()) == ["batch", "step"]


def test_what_a_reconfigure_dropped_is_put_back_at_the_next_look(world: NodesWorld) -> None:
    node = world.node(HOST)
    standard = world.node(OTHER, preemptible=False)
    world.add(node)
    world.add(standard)
    world.cordon(node, _deadline())
    world.lab.run("scontrol", "reconfigure")  # drops scontrol-made partitions and features
    wait_until(
        lambda: world.preemptible_partition not in world.slurm.partitions(),
        what="the reconfigure done",
    )
    world.nodes.reports()
    info, other = world.node_info(HOST), world.node_info(OTHER)
    assert world.preemptible_partition in info.partitions and FEATURE in info.features
    assert "drain" in info.state and info.reason.startswith("lowcostgpu: preempted")
    assert world.standard_partition in other.partitions


def test_a_record_reads_back_as_written_and_says_what_each_job_got(tmp_path: Path) -> None:
    records = NodeRecords(tmp_path)
    drain = Drain(1796162400, "preempted").seen("7", 0).with_signalled("7").seen("8", 2)
    drain = drain.with_killed("8").with_settled("8", requeued=True)
    record = NodeRecord("n-1", "c-1", "a-1", "node1", True, "lcg-c-1-preemptible", 1.5, drain)
    records.put(record)
    assert NodeRecords(tmp_path).get("n-1") == record  # a restarted provider reads the same
    assert records.by_allocation("a-1") == record and records.on_host("node2") == []
    assert drain.unsettled == ["7"] and drain.requeued == ("8",)
    with pytest.raises(InvalidRequest):
        records.get("../escape")


def test_the_drain_reason_names_why_and_the_deadline_in_utc() -> None:
    reason = drain_reason(Drain(1796162400, "preempted"))
    assert reason == "lowcostgpu: preempted, deadline=2026-12-01T22:00:00Z"
