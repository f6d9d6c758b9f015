"""The whole multi-node promise on real processes: a 2-node `torchrun` job launched through the
plane on the local runtime (its members started with the plane's variables only), reclaimed as
one by an on-demand request, requeued, restarted on two hosts, resumed from the checkpoint both
ranks saved at the notice (`sdk.torch_distributed`), and ending with every rank's per-step
losses bit-identical to an uninterrupted run of the same job."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import PROGRAM, LocalHarness, plane_on
from lowcostgpu.adapters.clock import FixedClock
from lowcostgpu.adapters.fakes import FakeVolumes
from lowcostgpu.adapters.store.memory import MemoryStore
from lowcostgpu.app.launch import LaunchRequest
from lowcostgpu.app.plane import ControlPlane
from lowcostgpu.core.snapshot import member_allocation_id
from lowcostgpu.domain.capacity import Host, PoolKey
from lowcostgpu.domain.status import InstanceStatus
from waiting import wait_until

pytest.importorskip("torch")
WORKER = Path(__file__).parents[2] / "sdk" / "torch_distributed_worker.py"
POOL = PoolKey("eu-west", "a100-sxm4")
STEPS = 12
STEP_LINE = re.compile(r"^step (\d+) loss (\S+)$", re.M)
# torchrun as a user writes it in a launch command: every value from the plane's variables.
TORCHRUN = (
    'exec "$0" -m torch.distributed.run --nnodes "$WORLD_SIZE" --nproc-per-node 1 '
    '--node-rank "$NODE_RANK" --master-addr "$MASTER_ADDR" --master-port "$MASTER_PORT" '
    f'"$1" --total-steps {STEPS} --every-steps 100 --sleep-s 0.4'
)


@pytest.fixture
def world(local: LocalHarness, tmp_path: Path) -> Iterator[tuple[ControlPlane, MemoryStore]]:
    store, root = MemoryStore(), tmp_path / "volumes"
    for name in ("ckpt", "ref"):
        (root / "acme" / name).mkdir(parents=True)
    hosts = [Host("box-a", POOL, 1), Host("box-b", POOL, 1)]
    wired = plane_on(
        local.runtime, hosts, store, FakeVolumes(root=str(root)), FixedClock(1_000_000)
    )
    yield wired.plane, store


def _launch(plane: ControlPlane, volume: str) -> str:
    command = ("sh", "-c", TORCHRUN, sys.executable, str(WORKER))
    request = LaunchRequest(
        "acme", "a100-sxm4", "interruptible", 1, command=command, volume=f"{volume}:1GB",
        grace_period_s=120, nodes=2,
    )  # fmt: skip
    return plane.launch(request).state.id


def _status(plane: ControlPlane, store: MemoryStore, instance_id: str) -> InstanceStatus:
    plane.tick()
    return store.instance(instance_id).state.status


def _losses(plane: ControlPlane, allocation_id: str) -> dict[int, str]:
    log = plane.runtime.logs(allocation_id, 1 << 20)
    return {int(step): loss for step, loss in STEP_LINE.findall(log)}


def test_a_torchrun_gang_reclaimed_through_the_plane_resumes_bit_identically(
    local: LocalHarness, world: tuple[ControlPlane, MemoryStore]
) -> None:
    plane, store = world
    gang = _launch(plane, "ckpt")
    wait_until(lambda: _status(plane, store, gang) is InstanceStatus.RUNNING, what="running")
    first_run = store.instance(gang).state.allocation_ids()
    wait_until(lambda: _losses(plane, first_run[1]).get(3), 180, what="three steps on every member")
    od_control = local.root / "control" / "od"
    od_control.mkdir(parents=True)
    od = plane.launch(
        LaunchRequest(
            "other", "a100-sxm4", "on-demand", 1,
            command=(sys.executable, str(PROGRAM), str(od_control)),
        )
    ).state.id  # fmt: skip
    wait_until(lambda: _status(plane, store, gang) is InstanceStatus.QUEUED, 180, what="requeued")
    interrupted = [_losses(plane, a) for a in first_run]
    stopped_at = max(interrupted[0])
    assert max(interrupted[1]) == stopped_at < STEPS  # both ranks stopped at the same step
    wait_until(lambda: _status(plane, store, od) is InstanceStatus.RUNNING, what="on-demand")
    (od_control / "exit").write_text("0")
    wait_until(lambda: _status(plane, store, gang) is InstanceStatus.RUNNING, 120, what="restart")
    second_run = store.instance(gang).state.allocation_ids()
    assert store.instance(gang).state.restart_count == 1
    wait_until(
        lambda: _status(plane, store, gang) is InstanceStatus.SUCCEEDED, 240, what="finished"
    )
    resumed = [_losses(plane, a) for a in second_run]
    assert all(min(r) == stopped_at + 1 for r in resumed)  # from the step saved at the notice

    reference = _launch(plane, "ref")  # the same job, never interrupted
    wait_until(
        lambda: _status(plane, store, reference) is InstanceStatus.SUCCEEDED, 300, what="ref"
    )
    whole = [_losses(plane, a) for a in _ran(store, reference)]
    for rank in (0, 1):
        assert {**interrupted[rank], **resumed[rank]} == whole[rank]
        assert sorted(whole[rank]) == list(range(1, STEPS + 1))


def _ran(store: MemoryStore, instance_id: str) -> list[str]:
    """The members' allocation ids of an instance's only run, by rank (an ended instance holds
    none any more; its run record keeps rank 0's)."""
    (run,) = store.instance(instance_id).state.runs
    return [member_allocation_id(run.allocation_id, rank) for rank in (0, 1)]
