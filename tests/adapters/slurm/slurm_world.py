"""Cluster nodes on the session's Slurm lab (`tests/slurm_lab.py`): a `SlurmNodes` provider on a
memory store, customers' batch jobs that say what they received, and a cleanup that gives every
host back to the pool (the lab is shared by the whole test session).

A helper module rather than a conftest.py: the runtime suite imports its own `conftest` by name,
and a sibling conftest module could shadow it."""

from __future__ import annotations

import os
import secrets
import subprocess
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import slurm_lab
from lowcostgpu.adapters.clock import RandomIds, SystemClock
from lowcostgpu.adapters.fakes import FakeVolumes
from lowcostgpu.adapters.files import load_catalog
from lowcostgpu.adapters.slurm import Slurm, SlurmRuntime
from lowcostgpu.adapters.slurm.nodes import SlurmNodes
from lowcostgpu.adapters.slurm.partitions import REASON_PREFIX, partition_name
from lowcostgpu.adapters.store.memory import MemoryStore
from lowcostgpu.app.clusters import ClusterRequest
from lowcostgpu.app.launch import LaunchRequest
from lowcostgpu.app.plane import PlaneConfig
from lowcostgpu.bootstrap.wiring import wire
from lowcostgpu.core.effects import AddNode, CordonNode, RemoveNode
from lowcostgpu.core.nodes import DRAIN_PREEMPTED, NodeState
from lowcostgpu.core.scheduler import SchedulerConfig
from lowcostgpu.domain.capacity import CapacityClass, Host, PoolKey
from lowcostgpu.domain.status import NodeStatus
from lowcostgpu.ports.store_records import Commit, NodeWrite, OutboxEntry
from waiting import wait_until

POOL = PoolKey("eu-west", "a100-sxm4")

# A customer's batch job: it records each start (with Slurm's restart count), the SIGTERMs its
# batch shell and its step receive, and ends with $JOB_EXIT once its step has ended (the step
# saves for 0.5 s at SIGTERM, so the batch shell is still there for its own). With
# STEP_IGNORES_TERM=1 the step ignores SIGTERM (only the deadline's SIGKILL ends it).
JOB_SCRIPT = """#!/bin/bash
d=$JOB_DIR
trap 'echo batch >> "$d/term"' TERM
echo "${SLURM_RESTART_COUNT:-0}" >> "$d/starts"
srun bash -c '
  if [ "$STEP_IGNORES_TERM" = 1 ]; then trap "echo step >> $JOB_DIR/term" TERM
  else trap "echo step >> $JOB_DIR/term; sleep 0.5; exit 0" TERM; fi
  echo up > "$JOB_DIR/running"
  while true; do sleep 0.1; done' &
while ! wait; do :; done
exit "${JOB_EXIT:-0}"
"""


def entry(effect: Any) -> OutboxEntry:
    """The outbox entry the plane would store for `effect` (as `app.decisions` makes it)."""
    payload = {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(effect).items()}
    return OutboxEntry(effect.effect_key, type(effect).__name__, payload, 0)


class NodesWorld:
    """One cluster (`c-<random>`) on the lab, its provider, and its customers' jobs."""

    def __init__(self, root: Path) -> None:
        self.lab = slurm_lab.require()
        self.root = root
        self.slurm = Slurm(self.lab.conf)
        self.store = MemoryStore()
        self.cluster_id = f"c-{secrets.token_hex(4)}"
        self.nodes = self.provider()
        self.jobs_dir = self.lab.shared / f"jobs-{self.cluster_id}"
        self.jobs_dir.mkdir()
        os.chmod(self.jobs_dir, 0o777)
        self._serial = 0

    def provider(self) -> SlurmNodes:
        """A provider on this world's records: a new one is a restarted control plane."""
        return SlurmNodes(self.slurm, self.store, self.root / "nodes")

    # -- the core's side: the node's record in the store, and its effects -----------------------

    def node(self, host: str, preemptible: bool = True, gpus: int = slurm_lab.GPUS) -> NodeState:
        """A ready node of the cluster on `host` (what the core stores before its AddNode)."""
        self._serial += 1
        capacity = CapacityClass.INTERRUPTIBLE if preemptible else CapacityClass.ON_DEMAND
        state = NodeState(
            id=f"n-{self.cluster_id}-{self._serial}",
            cluster_id=self.cluster_id,
            account_id="acme",
            pool=POOL,
            gpus=gpus,
            capacity_class=capacity,
            status=NodeStatus.READY,
            grace_period_s=30,
            allocation_id=f"a-{self.cluster_id}-{self._serial}",
            host_id=host,
            gpu_indices=tuple(range(gpus)),
            started_at=1,
        )
        self.store.commit(Commit(nodes=[NodeWrite(state, None)]))
        return state

    def add(self, state: NodeState) -> OutboxEntry:
        label = state.capacity_class.compute_class_label
        assert state.allocation_id is not None and state.host_id is not None
        effect = AddNode(
            state.id, state.cluster_id, state.allocation_id, state.host_id, state.gpu_indices, label
        )
        done = entry(effect)
        self.nodes.carry_out(done, None)  # type: ignore[arg-type]  # no runtime needed
        return done

    def cordon(self, state: NodeState, deadline: int, reason: str = DRAIN_PREEMPTED) -> OutboxEntry:
        """The core's reclaim: the node cordoned in the store with its deadline, then CordonNode."""
        stored = next(n for n in self.store.nodes() if n.state.id == state.id)
        drained = replace(
            state,
            status=NodeStatus.CORDONED,
            notice_at=deadline - state.grace_period_s,
            deadline=deadline,
            drain_reason=reason,
        )
        self.store.commit(Commit(nodes=[NodeWrite(drained, stored.version)]))
        done = entry(CordonNode(state.id))
        self.nodes.carry_out(done, None)  # type: ignore[arg-type]  # no runtime needed
        return done

    def remove(self, state: NodeState) -> OutboxEntry:
        """The core's end of the drain: the node removed in the store, then RemoveNode."""
        stored = next(n for n in self.store.nodes() if n.state.id == state.id)
        gone = replace(stored.state, status=NodeStatus.REMOVED, allocation_id=None, removed_at=2)
        self.store.commit(Commit(nodes=[NodeWrite(gone, stored.version)]))
        done = entry(RemoveNode(state.id))
        self.nodes.carry_out(done, None)  # type: ignore[arg-type]  # no runtime needed
        return done

    def again(self, done: OutboxEntry) -> None:
        """Carry out an entry once more (the outbox is at-least-once)."""
        self.nodes.carry_out(done, None)  # type: ignore[arg-type]  # no runtime needed

    def report(self, state: NodeState, provider: SlurmNodes | None = None) -> Any:
        reports = (provider or self.nodes).reports()
        return next((r for r in reports if r.allocation_id == state.allocation_id), None)

    # -- Slurm's side ------------------------------------------------------------------------

    @property
    def preemptible_partition(self) -> str:
        return partition_name(self.cluster_id, True)

    @property
    def standard_partition(self) -> str:
        return partition_name(self.cluster_id, False)

    def submit(self, name: str, *, exit_code: int = 0, ignore_term: bool = False, **kw: str) -> Job:
        """A customer's job (`sbatch --requeue -p lcg-<cluster>-preemptible` unless told)."""
        job_dir = self.jobs_dir / name
        job_dir.mkdir()
        os.chmod(job_dir, 0o777)
        partition = kw.pop("partition", self.preemptible_partition)
        requeue = kw.pop("requeue", "--requeue")
        env = f"ALL,JOB_DIR={job_dir},JOB_EXIT={exit_code},STEP_IGNORES_TERM={int(ignore_term)}"
        argv = [
            f"--partition={partition}",
            requeue,
            f"--export={env}",
            f"--output={job_dir}/out",
            f"--job-name={name}",
            f"--chdir={job_dir}",
        ]
        job_id = self.slurm.submit(argv, JOB_SCRIPT, what=f"the test job {name}")
        return Job(job_id, job_dir, self)

    def node_info(self, host: str) -> Any:
        return next(n for n in self.slurm.nodes() if n.name == host)

    def cleanup(self) -> None:
        """Cancel this cluster's jobs, give its hosts back, delete its partitions."""
        parts = [self.standard_partition, self.preemptible_partition]
        ids = [j.job_id for p in parts for j in self.slurm.jobs(p)]
        for job_id in ids:
            self.slurm.cancel(job_id)
        for record in self.nodes.records.all():
            self.nodes.remove(record.node_id)
        for info in self.slurm.nodes():
            if info.reason.startswith(REASON_PREFIX):
                self.lab.run("scontrol", "update", f"NodeName={info.name}", "State=RESUME")
        env = {**os.environ, "SLURM_CONF": str(self.lab.conf)}
        for p in parts:
            # Refused while slurmctld still holds a job of it (MinJobAge): left, empty, then.
            argv = ["scontrol", "delete", f"PartitionName={p}"]
            subprocess.run(argv, env=env, check=False, capture_output=True)


class Job:
    def __init__(self, job_id: str, directory: Path, world: NodesWorld) -> None:
        self.job_id, self.dir, self.world = job_id, directory, world

    def fields(self) -> dict[str, str]:
        return self.world.slurm.job_fields(self.job_id) or {}

    @property
    def state(self) -> str:
        return self.fields().get("JobState", "")

    @property
    def restarts(self) -> int:
        return int(self.fields().get("Restarts", "0"))

    def running(self) -> bool:
        """Its step is up (the step writes `running`)."""
        return (self.dir / "running").exists() and self.state == "RUNNING"

    def terms(self) -> list[str]:
        """Who got SIGTERM, in order: 'batch' (the batch shell), 'step' (the srun step)."""
        path = self.dir / "term"
        return path.read_text().split() if path.exists() else []

    def starts(self) -> list[str]:
        path = self.dir / "starts"
        return path.read_text().split() if path.exists() else []


class PlaneWorld(NodesWorld):
    """A control plane on the lab: `SlurmRuntime` for instances, `SlurmNodes` for cluster nodes,
    two whole hosts (`node1`, `node2`, 4 GPUs each) in one pool."""

    HOSTS = ("node1", "node2")

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.runtime = SlurmRuntime(self.slurm, root / "runtime", nodes=self.nodes)
        self.wired = wire(
            store=self.store,
            runtime=self.runtime,
            volumes=FakeVolumes(),
            nodes=self.nodes,
            clock=SystemClock(),
            ids=RandomIds(),
            hosts=[Host(h, POOL, slurm_lab.GPUS) for h in self.HOSTS],
            catalog=load_catalog(),
            secret=b"0123456789abcdef0123456789abcdef",
            metadata_url="http://127.0.0.1:9/v1/metadata",
            config=PlaneConfig(scheduler=SchedulerConfig(min_runtime_s=0), whole_host_nodes=True),
        )
        self.plane = self.wired.plane

    def create_cluster(self, grace_s: int) -> str:
        """One standard node and 4 preemptible GPUs (one node each: whole hosts)."""
        request = ClusterRequest(
            "acme", POOL.gpu_type, slurm_lab.GPUS, 1, 4, grace_period_s=grace_s
        )
        self.cluster_id = self.plane.clusters.create_cluster(request).cluster.id
        return self.cluster_id

    def on_demand(self, argv: tuple[str, ...]) -> str:
        request = LaunchRequest(
            "acme", POOL.gpu_type, "on-demand", slurm_lab.GPUS, command=argv, grace_period_s=2
        )
        return self.plane.launch(request).state.id

    def tick_until(self, predicate: Any, what: str) -> Any:
        def ticked() -> Any:
            self.plane.tick()
            return predicate()

        return wait_until(ticked, what=what)

    def live_nodes(self, compute_class: str) -> list[NodeState]:
        view = self.plane.clusters.get_cluster(self.cluster_id)
        return [n for n in view.nodes if n.capacity_class.compute_class_label == compute_class]

    def cleanup(self) -> None:
        for job in self.slurm.jobs(self.runtime.partition):
            self.slurm.cancel(job.job_id)
        super().cleanup()
