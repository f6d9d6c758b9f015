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

The provider is the order of things (each effect, each report); its parts: `partitions` (what a
record means in slurmctld: partition, feature, drain), `drain_jobs` (what a drain does to the
jobs on the node), `node_records` (what it made true) and `node_risk` (the risk comment).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from lowcostgpu.adapters.risk_marks import RiskMarks
from lowcostgpu.adapters.slurm.cli import NodeInfo, Slurm
from lowcostgpu.adapters.slurm.drain_jobs import DrainJobs
from lowcostgpu.adapters.slurm.node_records import (
    Drain,
    NodeRecord,
    NodeRecords,
    check_id,
    members,
)
from lowcostgpu.adapters.slurm.node_risk import set_risk_comment
from lowcostgpu.adapters.slurm.partitions import (
    FEATURE,
    NODES_LOGGER,
    REASON_PREFIX,
    check_whole_host,
    drain_host,
    make_true,
    partition_name,
    set_feature,
    set_members,
)
from lowcostgpu.core.nodes import NodeState
from lowcostgpu.domain.errors import Conflict, InvalidRequest, NotFound
from lowcostgpu.domain.status import NodeStatus
from lowcostgpu.ports.runtime import Runtime, WorkloadReport
from lowcostgpu.ports.store import Store
from lowcostgpu.ports.store_records import OutboxEntry

log = logging.getLogger(NODES_LOGGER)


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
        self._jobs = DrainJobs(slurm, self.records)

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
            make_true(self.slurm, self.records.all(), self._infos())

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
            drain_host(self.slurm, record)

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
            drain_host(self.slurm, record)  # the cordon first, should its effect not have run yet
            self._jobs.terminate(record, batch=self.signal_batch)

    def kill(self, allocation_id: str) -> None:
        """The deadline: SIGKILL to what still runs, and requeue it."""
        with self._lock:
            record = self.records.by_allocation(allocation_id)
            if record is None:
                return
            record = self._jobs.kill_running(self._with_drain(record, reason="killed"))
            self._jobs.await_killed(record)
            self._jobs.settle(record)

    def reports(self) -> list[WorkloadReport]:
        """One report per node of ours, after putting back what Slurm lost (see the module)."""
        with self._lock:
            records = self.records.all()
            if not records:
                return []
            try:
                make_true(self.slurm, records, self._infos())
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
            record, left = self._jobs.settle(record)
        except (InvalidRequest, NotFound, Conflict) as exc:
            log.warning("drain of node %s on %s: %s", node, record.host, exc)
            return WorkloadReport(alloc, node, "running", reason=f"draining: {exc}")
        assert record.drain is not None
        if left:
            return WorkloadReport(alloc, node, "running", reason=f"draining: {left} job(s) left")
        requeued = len(record.drain.requeued)
        reason = f"drained: {requeued} job(s) requeued"
        return WorkloadReport(alloc, node, "exited", exit_code=0, reason=reason)

    def _remove(self, record: NodeRecord) -> None:
        """Kill and requeue what still runs, then give the host back to the pool."""
        record = self._jobs.kill_running(self._with_drain(record, reason="removed"))
        self._jobs.await_killed(record)
        self._jobs.settle(record)
        rest = [r for r in self.records.all() if r.node_id != record.node_id]
        info = self._infos().get(record.host)
        if info is not None:
            if record.partition in info.partitions:
                set_members(self.slurm, record.partition, members(rest, record.partition))
            alone = not any(r.host == record.host for r in rest)
            if alone:  # else the comment is the other record's
                set_risk_comment(self.slurm, record.host, "", 0)
            if record.preemptible and FEATURE in info.features and alone:
                set_feature(self.slurm, record.host, add=False)
            if "drain" in info.state.lower() and info.reason.startswith(REASON_PREFIX):
                what = f"returning Slurm node {record.host} to the pool"
                self.slurm.update(
                    "NodeName", {"NodeName": record.host, "State": "RESUME"}, what=what
                )
        self.records.delete(record.node_id)
        self._risk_marks.forget(record.node_id)

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
        return self.records.put_drain(record, drain)

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
