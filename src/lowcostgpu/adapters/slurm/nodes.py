"""Cluster nodes on Slurm: a cluster is a pair of Slurm partitions of whole nodes.

The core decides and emits `AddNode`, `CordonNode`, `SignalWorkload`/`KillWorkload` on the node's
allocation, and `RemoveNode` (`core.nodes`); this provider makes them true in slurmctld:

- `AddNode`: the host (a whole Slurm node: the core may cut nodes smaller than a host, Slurm
  cannot, so such a node is refused here with what to do) joins the cluster's partition,
  `lcg-<cluster id>` for standard nodes, `lcg-<cluster id>-preemptible` for preemptible ones,
  which also get the node feature `preemptible` (as the Kubernetes taint marks them). Customers
  submit with `sbatch -p lcg-<cluster id>-preemptible` (or `--constraint=preemptible`).
  Partitions are made on first use and kept when their last node leaves: Slurm 22.05 allows an
  empty partition, and jobs submitted to it wait (Reason=PartitionConfig) until a node joins.
- `CordonNode`: `scontrol update State=DRAIN Reason="lowcostgpu: preempted, deadline=<UTC>"`.
- the node's SIGTERM: each job of the cluster on the node gets SIGTERM to its steps and to its
  batch shell (`scancel --signal=TERM`, then with `--batch`; never `--full`, which makes srun
  kill the step at once). Each job is signalled once, however often the effect is replayed.
  A batch script must trap SIGTERM (`trap '…' TERM`, the step run `srun … & wait`): one that
  does not ends at once, and Slurm then gives its steps only `KillWait` (see `signal_batch`).
- the node's report (the runtime's `observe`): `running` once added, `exited` once no job of the
  cluster runs on the node (that ends the drain in the core). Jobs that ended inside the grace
  are requeued unless they ended COMPLETED (exit 0), CANCELLED (their owner's scancel), TIMEOUT
  or DEADLINE (their own limits): the user lost the run to the preemption, not to their job.
- `KillWorkload` at the deadline: `scancel --signal=KILL --full` and `scontrol requeue` for what
  still runs (a requeued job is eligible again `cred_expire` + 1 s later: Slurm's rule, kept).
  Jobs submitted `--no-requeue` (or under `JobRequeue=0` without `--requeue`) are left ended.
- `RemoveNode`: the host leaves the partition, loses the feature, `State=RESUME`: it is back in
  the pool (partition `lowcostgpu`).
- `MarkNodeRisk`: a serving preemptible node among the next victims gets the comment
  `lowcostgpu: preemption-risk=next since=<UTC>` (`node_risk`), cleared when the pressure ends,
  at its drain and at its removal; a draining node is never marked.

State: the records of `node_records` (a JSON file per node in `state_dir`), and slurmctld's own.
Every `reports()` puts back what a `scontrol reconfigure` dropped (partitions, features, drains),
so a restart of either side continues where it stopped. Every operation is idempotent; a job is
requeued at most once per drain (its restart count is checked against the one recorded).

Cost: `reports()` is O(records) file reads, one `sinfo`, and one `squeue` per draining node.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from lowcostgpu.adapters.risk_marks import RiskMarks
from lowcostgpu.adapters.slurm.cli import NodeInfo, NodeJob, Slurm, no_batch_shell
from lowcostgpu.adapters.slurm.node_records import (
    Drain,
    NodeRecord,
    NodeRecords,
    check_id,
    members,
)
from lowcostgpu.adapters.slurm.node_risk import set_risk_comment
from lowcostgpu.core.nodes import NodeState
from lowcostgpu.domain.errors import Conflict, InvalidRequest, NotFound
from lowcostgpu.domain.status import NodeStatus
from lowcostgpu.ports.runtime import Runtime, WorkloadReport
from lowcostgpu.ports.store import Store
from lowcostgpu.ports.store_records import OutboxEntry

log = logging.getLogger(__name__)
FEATURE = "preemptible"
REASON_PREFIX = "lowcostgpu:"
ON_NODE = frozenset(
    {"RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED", "STOPPED", "SIGNALING", "RESIZING"}
)
LIVE = ON_NODE - {"COMPLETING"}  # its processes run: a requeue now would SIGTERM them first
LEFT_AS_ENDED = frozenset({"COMPLETED", "CANCELLED", "TIMEOUT", "DEADLINE"})
KILL_SETTLE_S = 10.0  # a kill waits this long for its SIGKILLs to land before it requeues


def partition_name(cluster_id: str, preemptible: bool) -> str:
    return f"lcg-{cluster_id}-preemptible" if preemptible else f"lcg-{cluster_id}"


def cluster_partitions(cluster_id: str) -> tuple[str, str]:
    return partition_name(cluster_id, False), partition_name(cluster_id, True)


def drain_reason(drain: Drain) -> str:
    """The node's Reason in `sinfo -R`: why and until when (UTC)."""
    deadline = datetime.fromtimestamp(drain.deadline, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"{REASON_PREFIX} {drain.reason}, deadline={deadline}"


class SlurmNodes:
    """The node provider (`ports.nodes.NodeProvider`) over one Slurm cluster, and the runtime's
    `NodeAllocations` (`SlurmRuntime(nodes=...)` hands it the nodes' allocations).

    `store`: the control plane's, for a drain's deadline and reason (the CordonNode effect names
    only the node). `state_dir`: the provider's records (the control plane's disk; suggested:
    `<runtime state dir>/.nodes`, which the runtime's `observe` skips). `signal_batch`: the
    SIGTERM goes to batch shells too. A batch shell that does not trap SIGTERM then dies at
    once, the job ends, and Slurm's end of job gives its steps only `KillWait` (measured: a
    step that needed 20 s to save was killed 4.8 s in under KillWait=5; with steps only it
    saved and completed): sites whose scripts do not trap it may turn this off."""

    def __init__(
        self,
        slurm: Slurm,
        store: Store,
        state_dir: Path | str,
        *,
        signal_batch: bool = True,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.slurm = slurm
        self.signal_batch = signal_batch
        self.store = store
        self.clock = clock
        self.records = NodeRecords(state_dir)
        self._lock = threading.RLock()  # effects and the loop's observe may run in two threads
        self._risk_marks = RiskMarks()

    # -- effects -------------------------------------------------------------------------------

    def carry_out(self, entry: OutboxEntry, runtime: Runtime) -> None:
        p = entry.payload
        match entry.kind:
            case "AddNode":
                self.add(p)
            case "CordonNode":
                self.cordon(str(p["node_id"]))
            case "RemoveNode":
                self.remove(str(p["node_id"]))
            case "MarkNodeRisk":
                self.mark_risk(str(p["node_id"]), str(p["risk"]), int(p["at"]))

    def add(self, payload: Mapping[str, Any]) -> None:
        node_id, cluster_id = str(payload["node_id"]), str(payload["cluster_id"])
        host, gpus = str(payload["host_id"]), len(payload["gpu_indices"])
        check_id(node_id, "node id")
        check_id(cluster_id, "cluster id")
        with self._lock:
            if self.records.get(node_id) is None:
                state = self._state(node_id)
                if state is not None and state.status is NodeStatus.REMOVED:
                    log.info("add of node %s: it has come and gone since", node_id)
                    return
                check_whole_host(node_id, self._host(host), gpus)
                for other in self.records.on_host(host):  # the core freed it: its late removal
                    log.info("node %s takes host %s from node %s", node_id, host, other.node_id)
                    self._remove(other)
                preemptible = str(payload["compute_class"]) == "preemptible"
                record = NodeRecord(
                    node_id=node_id,
                    cluster_id=cluster_id,
                    allocation_id=str(payload["allocation_id"]),
                    host=host,
                    preemptible=preemptible,
                    partition=partition_name(cluster_id, preemptible),
                    added_at=self.clock(),
                )
                self.records.put(record)
            self._make_true(self.records.all(), self._infos())

    def cordon(self, node_id: str) -> None:
        with self._lock:
            record = self.records.get(node_id)
            if record is None:
                log.info("cordon of %s: the node is gone already", node_id)
                return
            record = self._with_drain(record)
            if record.drain is None:
                log.warning("cordon of %s: the store holds no drain for it; nothing done", node_id)
                return
            self._drain(record)

    def mark_risk(self, node_id: str, risk: str, at: int) -> None:
        """The node's risk comment (`node_risk`), or its removal (`risk` ""). A draining node is
        not marked (its drain reason replaces the advice); a node with no record is gone."""
        with self._lock:
            record = self.records.get(node_id)
            if record is None:
                log.info("risk mark of %s: the node is gone already", node_id)
                return
            if not self._risk_marks.latest(node_id, at):
                return
            if risk and record.drain is not None:
                log.info("risk mark of %s: the node is draining", node_id)
                return
            set_risk_comment(self.slurm, record.host, risk, at)

    def remove(self, node_id: str) -> None:
        with self._lock:
            record = self.records.get(node_id)
            if record is None:
                log.info("remove of %s: the node is gone already", node_id)
                return
            self._remove(record)

    # -- the node's allocation, as the runtime sees it -----------------------------------------

    def owns(self, allocation_id: str) -> bool:
        return self.records.by_allocation(allocation_id) is not None

    def signal(self, allocation_id: str) -> None:
        """The node's SIGTERM: to each job of the cluster on it, steps and batch shell, once."""
        with self._lock:
            record = self.records.by_allocation(allocation_id)
            if record is None:
                return
            record = self._with_drain(record)
            if record.drain is None:
                log.warning("SIGTERM to node %s without a drain: nothing sent", record.node_id)
                return
            self._drain(record)  # the cordon first, should its effect not have run yet
            for job in self._jobs(record):
                if job.state not in ON_NODE:
                    continue
                drain = record.drain.seen(job.job_id, job.restarts)
                if job.job_id not in drain.signalled:
                    self.slurm.signal(job.job_id, "TERM")
                    if self.signal_batch:
                        self._term_batch(job.job_id)
                    drain = drain.with_signalled(job.job_id)
                record = self._put(record, drain)

    def _term_batch(self, job_id: str) -> None:
        try:
            self.slurm.signal(job_id, "TERM", batch=True)
        except InvalidRequest as exc:
            if not no_batch_shell(exc):
                raise  # an interactive job (srun, salloc) has no batch shell: its steps had it

    def kill(self, allocation_id: str) -> None:
        """The deadline: SIGKILL to what still runs, and requeue it."""
        with self._lock:
            record = self.records.by_allocation(allocation_id)
            if record is None:
                return
            record = self._kill_running(self._with_drain(record, reason="killed"))
            self._await_killed(record)
            self._settle(record)

    def reports(self) -> list[WorkloadReport]:
        """One report per node of ours, after putting back what Slurm lost (see the module)."""
        with self._lock:
            records = self.records.all()
            if not records:
                return []
            try:
                self._make_true(records, self._infos())
                if not self._risk_marks.checked:  # an earlier process's marks (`risk_marks`)
                    for r in records:
                        if not self._risk_marks.ours(r.node_id):
                            set_risk_comment(self.slurm, r.host, "", 0)
                    self._risk_marks.checked = True
            except (InvalidRequest, NotFound, Conflict) as exc:
                log.warning("Slurm cluster nodes: could not restore their partitions: %s", exc)
            return [self._report(r) for r in records]

    # -- internals -----------------------------------------------------------------------------

    def _report(self, record: NodeRecord) -> WorkloadReport:
        alloc, node = record.allocation_id, record.node_id
        if record.drain is None:
            return WorkloadReport(alloc, node, "running", at=int(record.added_at))
        try:
            record, left = self._settle(record)
        except (InvalidRequest, NotFound, Conflict) as exc:
            log.warning("drain of node %s on %s: %s", node, record.host, exc)
            return WorkloadReport(alloc, node, "running", reason=f"draining: {exc}")
        assert record.drain is not None
        if left:
            return WorkloadReport(alloc, node, "running", reason=f"draining: {left} job(s) left")
        requeued = len(record.drain.requeued)
        reason = f"drained: {requeued} job(s) requeued"
        return WorkloadReport(alloc, node, "exited", exit_code=0, reason=reason)

    def _settle(self, record: NodeRecord) -> tuple[NodeRecord, int]:
        """Requeue the jobs of the drain that ended (see the module's rules) or that we killed;
        the record, and how many jobs of the cluster still run on the node."""
        assert record.drain is not None
        jobs = {j.job_id: j for j in self._jobs(record)}
        drain = record.drain
        for running in jobs.values():
            if running.state in ON_NODE:
                drain = drain.seen(running.job_id, running.restarts)
        record = self._put(record, drain)
        for job_id in drain.unsettled:
            job = jobs.get(job_id)
            if job is None or job.restarts != drain.jobs[job_id]:
                drain = drain.with_settled(job_id, requeued=False)  # requeued since, or forgotten
            elif job_id in drain.killed or job.state not in ON_NODE:
                drain = drain.with_settled(job_id, self._requeue(record, drain, job))
            record = self._put(record, drain)
        left = sum(1 for j in jobs.values() if j.state in ON_NODE and j.job_id not in drain.settled)
        return record, left

    def _requeue(self, record: NodeRecord, drain: Drain, job: NodeJob) -> bool:
        killed = job.job_id in drain.killed
        if not killed and job.state in LEFT_AS_ENDED:
            return False
        if not job.requeue:
            log.info("job %s of node %s is not requeueable: left ended", job.job_id, record.node_id)
            return False
        try:
            requeued = self.slurm.requeue(job.job_id)
        except InvalidRequest as exc:  # e.g. not a batch job: Slurm requeues batch jobs only
            log.warning("job %s of node %s left ended: %s", job.job_id, record.node_id, exc)
            return False
        if requeued:
            how = "killed at the deadline" if killed else f"ended {job.state} in its grace"
            log.info("job %s (%s) on %s requeued", job.job_id, how, record.host)
        return requeued

    def _kill_running(self, record: NodeRecord) -> NodeRecord:
        assert record.drain is not None
        for job in self._jobs(record):
            if job.state not in ON_NODE:
                continue
            drain = record.drain.seen(job.job_id, job.restarts)
            if drain.jobs[job.job_id] != job.restarts:
                continue  # requeued since we saw it: not the run we drain
            if job.job_id not in drain.killed:
                self.slurm.kill_job(job.job_id)
                drain = drain.with_killed(job.job_id)
            record = self._put(record, drain)
        return record

    def _await_killed(self, record: NodeRecord) -> None:
        """Until the killed jobs' processes are gone (≈0.5 s), at most `KILL_SETTLE_S`: a
        requeue of a job that still runs is a cancel, which sends SIGTERM before SIGKILL."""
        assert record.drain is not None
        killed = set(record.drain.killed) - set(record.drain.settled)
        end = time.monotonic() + KILL_SETTLE_S
        while killed and time.monotonic() < end:
            if not any(j.job_id in killed and j.state in LIVE for j in self._jobs(record)):
                return
            time.sleep(0.1)

    def _remove(self, record: NodeRecord) -> None:
        """Kill and requeue what still runs, then give the host back to the pool."""
        record = self._kill_running(self._with_drain(record, reason="removed"))
        self._await_killed(record)
        self._settle(record)
        rest = [r for r in self.records.all() if r.node_id != record.node_id]
        info = self._infos().get(record.host)
        if info is not None:
            if record.partition in info.partitions:
                self._set_members(record.partition, members(rest, record.partition))
            alone = not any(r.host == record.host for r in rest)
            if alone:  # else the comment is the other record's
                set_risk_comment(self.slurm, record.host, "", 0)
            if record.preemptible and FEATURE in info.features and alone:
                self._feature(record.host, add=False)
            if "drain" in info.state.lower() and info.reason.startswith(REASON_PREFIX):
                what = f"returning Slurm node {record.host} to the pool"
                self.slurm.update(
                    "NodeName", {"NodeName": record.host, "State": "RESUME"}, what=what
                )
        self.records.delete(record.node_id)
        self._risk_marks.forget(record.node_id)

    def _make_true(self, records: list[NodeRecord], infos: Mapping[str, NodeInfo]) -> None:
        """Partitions, features and drains as the records say (a reconfigure drops them)."""
        for partition in sorted({r.partition for r in records}):
            want = members(records, partition)
            have = sorted(n for n, info in infos.items() if partition in info.partitions)
            if want != have:
                self._set_members(partition, want)
        for r in records:
            info = infos.get(r.host)
            if info is None:
                log.warning("node %s: host %s is not in the Slurm cluster", r.node_id, r.host)
                continue
            if r.preemptible and FEATURE not in info.features:
                self._feature(r.host, add=True)
            if r.drain is not None and "drain" not in info.state.lower():
                self._drain(r)

    def _set_members(self, partition: str, hosts: list[str]) -> None:
        fields = {"PartitionName": partition, "Nodes": ",".join(hosts)}
        try:
            self.slurm.update("PartitionName", fields, what=f"setting the nodes of {partition}")
        except InvalidRequest as exc:
            if "invalid partition name" not in str(exc).lower():
                raise
            self.slurm.create_partition(partition, hosts)

    def _feature(self, host: str, *, add: bool) -> None:
        """Add or drop `preemptible`, keeping the node's other features."""
        fields = self.slurm.node_fields(host)
        update = {"NodeName": host}
        for key in ("AvailableFeatures", "ActiveFeatures"):
            have = [f for f in fields.get(key, "").split(",") if f and f != "(null)"]
            kept = [f for f in have if f != FEATURE]
            update[key] = ",".join([*kept, FEATURE] if add else kept)
        verb = "marking" if add else "unmarking"
        self.slurm.update("NodeName", update, what=f"{verb} Slurm node {host} {FEATURE}")

    def _drain(self, record: NodeRecord) -> None:
        assert record.drain is not None
        fields = {"NodeName": record.host, "State": "DRAIN", "Reason": drain_reason(record.drain)}
        self.slurm.update("NodeName", fields, what=f"draining Slurm node {record.host}")
        set_risk_comment(self.slurm, record.host, "", 0)  # the notice replaces the advice

    def _with_drain(self, record: NodeRecord, reason: str | None = None) -> NodeRecord:
        """The record with its drain: as recorded, else from the store's node (its deadline),
        else (`reason` given: a kill or removal with no drain known) one ending now."""
        if record.drain is not None:
            return record
        state = self._state(record.node_id)
        if state is not None and state.deadline is not None:
            drain = Drain(state.deadline, state.drain_reason or "drained")
        elif reason is not None:
            drain = Drain(int(self.clock()), reason)
        else:
            return record
        return self._put(record, drain)

    def _put(self, record: NodeRecord, drain: Drain) -> NodeRecord:
        if drain == record.drain:
            return record
        record = replace(record, drain=drain)
        self.records.put(record)
        return record

    def _jobs(self, record: NodeRecord) -> list[NodeJob]:
        return self.slurm.jobs_on(record.host, cluster_partitions(record.cluster_id))

    def _infos(self) -> dict[str, NodeInfo]:
        return {n.name: n for n in self.slurm.nodes()}

    def _host(self, host: str) -> NodeInfo:
        info = self._infos().get(host)
        if info is None:
            raise InvalidRequest(
                f"host {host} is not a node of {self.slurm.where}",
                hint="the fleet's host ids must be Slurm node names (`sinfo -N`)",
            )
        return info

    def _state(self, node_id: str) -> NodeState | None:
        try:
            return self.store.node(node_id).state
        except NotFound:
            return None


def check_whole_host(node_id: str, host: NodeInfo, gpus: int) -> None:
    """A cluster node on Slurm is a whole Slurm node: a partition holds hosts, not GPUs."""
    if gpus != host.gpus:
        raise InvalidRequest(
            f"node {node_id} would take {gpus} of the {host.gpus} GPUs of Slurm node "
            f"{host.name}: on Slurm a cluster node is a whole host",
            hint=f"make the cluster's gpus_per_node {host.gpus}, the GPUs of each host of this "
            "pool (delete this cluster and create it again)",
        )
