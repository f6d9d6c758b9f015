"""End to end on real processes: a 2-node instance on the local runtime and on a real Slurm (one
job per member, each pinned to its node, the lab's `tests/slurm_lab.py`). Both members join one
gloo group with the variables the plane gives them (`torchrun --nnodes` reads the same), share
the volume, are interrupted together when an on-demand request reclaims one of their hosts,
and restart together, same ranks, `LOWCOSTGPU_RESTART_COUNT=1`, once two hosts are free."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import PROGRAM, LocalHarness, SlurmHarness, plane_on
from lowcostgpu.adapters.clock import FixedClock
from lowcostgpu.adapters.fakes import FakeVolumes
from lowcostgpu.adapters.store.memory import MemoryStore
from lowcostgpu.app.launch import LaunchRequest
from lowcostgpu.bootstrap.wiring import Wired
from lowcostgpu.domain.capacity import Host, PoolKey
from lowcostgpu.domain.events import Reason
from lowcostgpu.domain.status import InstanceStatus
from waiting import wait_until

pytest.importorskip("torch")
WORKER = Path(__file__).with_name("gang_worker.py")
POOL = PoolKey("eu-west", "a100-sxm4")


@pytest.fixture(params=["local", "slurm"])
def real(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[LocalHarness]:
    """A runtime on real processes: the local one, or Slurm's (its hosts are the lab's nodes)."""
    harness = LocalHarness(tmp_path) if request.param == "local" else SlurmHarness(tmp_path)
    yield harness
    harness.cleanup()


def _hosts(real: LocalHarness) -> list[Host]:
    names = ["node1", "node2"] if isinstance(real, SlurmHarness) else ["box-a", "box-b"]
    return [Host(name, POOL, 1) for name in names]


@pytest.fixture
def gang_plane(real: LocalHarness, tmp_path: Path) -> Iterator[tuple[Wired, MemoryStore, Path]]:
    store, volumes_root = MemoryStore(), tmp_path / "volumes"
    volumes = FakeVolumes(root=str(volumes_root))
    wired = plane_on(real.runtime, _hosts(real), store, volumes, FixedClock(1_000_000))
    volume = volumes_root / "acme" / "ckpt"
    volume.mkdir(parents=True)
    yield wired, store, volume


def _seen(volume: Path, restart: int) -> list[dict[str, str]] | None:
    files = [volume / f"rank{rank}-restart{restart}.json" for rank in (0, 1)]
    if not all(f.exists() for f in files):
        return None
    return [json.loads(f.read_text()) for f in files]


def test_a_two_node_instance_runs_is_reclaimed_as_one_and_restarts_with_its_ranks(
    real: LocalHarness, gang_plane: tuple[Wired, MemoryStore, Path]
) -> None:
    wired, store, volume = gang_plane
    plane = wired.plane
    gang = plane.launch(
        LaunchRequest(
            "acme",
            "a100-sxm4",
            "interruptible",
            1,
            command=(sys.executable, str(WORKER)),
            volume="ckpt:1GB",
            grace_period_s=60,
            nodes=2,
        )
    ).state.id

    def seen(restart: int) -> list[dict[str, str]] | None:
        plane.tick()
        return _seen(volume, restart)

    first = wait_until(lambda: seen(0), deadline_s=120, what="both members joined the gang")
    assert [m["sum"] for m in first] == ["3", "3"]  # 1 + 2: one group of two
    assert [m["LOWCOSTGPU_NODE_RANK"] for m in first] == ["0", "1"]
    assert {m["MASTER_ADDR"] for m in first} == {"127.0.0.1"}
    assert len({m["MASTER_PORT"] for m in first}) == 1
    state = store.instance(gang).state
    assert state.status is InstanceStatus.RUNNING
    held = sorted([str(state.host_id), *(m.host_id for m in state.members)])
    assert held == [h.id for h in _hosts(real)]

    od_control = real.root / "control" / "od"
    od_control.mkdir(parents=True)
    od = plane.launch(
        LaunchRequest(
            "other",
            "a100-sxm4",
            "on-demand",
            1,
            command=(sys.executable, str(PROGRAM), str(od_control)),
        )
    ).state.id
    preempted = [e for e in store.events() if e.object_id == gang and e.reason is Reason.PREEMPTED]
    assert len(preempted) == 1  # one notice for the gang, not one per host

    def requeued() -> bool:
        plane.tick()
        return store.instance(gang).state.status is InstanceStatus.QUEUED

    wait_until(requeued, 60, what="the gang requeued after both members exited")
    assert all((volume / f"rank{rank}-restart0.saved").exists() for rank in (0, 1))

    def od_running() -> bool:
        plane.tick()
        return store.instance(od).state.status is InstanceStatus.RUNNING

    wait_until(od_running, what="the on-demand instance running")
    (od_control / "exit").write_text("0")
    second = wait_until(lambda: seen(1), 120, what="the gang restarted on two hosts")
    assert [m["sum"] for m in second] == ["3", "3"]
    assert [m["LOWCOSTGPU_NODE_RANK"] for m in second] == ["0", "1"]
    assert second[0]["MASTER_PORT"] != first[0]["MASTER_PORT"]  # a new run, a new rendezvous
    plane.stop(gang)

    def stopped() -> bool:
        plane.tick()
        return store.instance(gang).state.status is InstanceStatus.STOPPED

    wait_until(stopped, what="the gang stopped")
