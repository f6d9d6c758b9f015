"""What a node's drain does to the jobs of its cluster on the node: SIGTERM, SIGKILL, requeue.

The provider (`nodes.SlurmNodes`) decides when (the notice, the deadline, the removal, each
report); this is how, job by job, with Slurm's rules: SIGTERM to steps and batch shell once per
job, SIGKILL at the deadline and a wait for it to land before the requeue (a requeue of a job
that still runs is a cancel, which sends SIGTERM first), and the requeue rule (jobs that ended
inside the grace are requeued unless they ended COMPLETED, CANCELLED, TIMEOUT or DEADLINE; jobs
killed at the deadline always, when requeueable). It is apart because it is the part that
speaks to jobs (`squeue`, `scancel`, `scontrol requeue`), not to the node's configuration
(`partitions`), and because each step is recorded in the node's `Drain` as it is done, so a
replay or a restarted control plane never signals or requeues a job twice.
"""

from __future__ import annotations

import logging
import time

from lowcostgpu.adapters.slurm.cli import NodeJob, Slurm, no_batch_shell
from lowcostgpu.adapters.slurm.node_records import Drain, NodeRecord, NodeRecords
from lowcostgpu.adapters.slurm.partitions import NODES_LOGGER, cluster_partitions
from lowcostgpu.domain.errors import InvalidRequest

log = logging.getLogger(NODES_LOGGER)
ON_NODE = frozenset(
    {"RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED", "STOPPED", "SIGNALING", "RESIZING"}
)
LIVE = ON_NODE - {"COMPLETING"}  # its processes run: a requeue now would SIGTERM them first
LEFT_AS_ENDED = frozenset({"COMPLETED", "CANCELLED", "TIMEOUT", "DEADLINE"})
KILL_SETTLE_S = 10.0  # a kill waits this long for its SIGKILLs to land before it requeues


class DrainJobs:
    """The jobs of draining nodes, on `slurm`; every step recorded in the node's record."""

    def __init__(self, slurm: Slurm, records: NodeRecords) -> None:
        self.slurm = slurm
        self.records = records

    def on_node(self, record: NodeRecord) -> list[NodeJob]:
        return self.slurm.jobs_on(record.host, cluster_partitions(record.cluster_id))

    def terminate(self, record: NodeRecord, *, batch: bool) -> None:
        """SIGTERM to each job of the cluster on the node, to its steps (and its batch shell
        with `batch`), once."""
        assert record.drain is not None
        for job in self.on_node(record):
            if job.state not in ON_NODE:
                continue
            drain = record.drain.seen(job.job_id, job.restarts)
            if job.job_id not in drain.signalled:
                self.slurm.signal(job.job_id, "TERM")
                if batch:
                    self._term_batch(job.job_id)
                drain = drain.with_signalled(job.job_id)
            record = self.records.put_drain(record, drain)

    def _term_batch(self, job_id: str) -> None:
        try:
            self.slurm.signal(job_id, "TERM", batch=True)
        except InvalidRequest as exc:
            if not no_batch_shell(exc):
                raise  # an interactive job (srun, salloc) has no batch shell: its steps had it

    def settle(self, record: NodeRecord) -> tuple[NodeRecord, int]:
        """Requeue the jobs of the drain that ended (see the module's rules) or that we killed;
        the record, and how many jobs of the cluster still run on the node."""
        assert record.drain is not None
        jobs = {j.job_id: j for j in self.on_node(record)}
        drain = record.drain
        for running in jobs.values():
            if running.state in ON_NODE:
                drain = drain.seen(running.job_id, running.restarts)
        record = self.records.put_drain(record, drain)
        for job_id in drain.unsettled:
            job = jobs.get(job_id)
            if job is None or job.restarts != drain.jobs[job_id]:
                drain = drain.with_settled(job_id, requeued=False)  # requeued since, or forgotten
            elif job_id in drain.killed or job.state not in ON_NODE:
                drain = drain.with_settled(job_id, self._requeue(record, drain, job))
            record = self.records.put_drain(record, drain)
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

    def kill_running(self, record: NodeRecord) -> NodeRecord:
        assert record.drain is not None
        for job in self.on_node(record):
            if job.state not in ON_NODE:
                continue
            drain = record.drain.seen(job.job_id, job.restarts)
            if drain.jobs[job.job_id] != job.restarts:
                continue  # requeued since we saw it: not the run we drain
            if job.job_id not in drain.killed:
                self.slurm.kill_job(job.job_id)
                drain = drain.with_killed(job.job_id)
            record = self.records.put_drain(record, drain)
        return record

    def await_killed(self, record: NodeRecord) -> None:
        """Until the killed jobs' processes are gone (≈0.5 s), at most `KILL_SETTLE_S`: a
        requeue of a job that still runs is a cancel, which sends SIGTERM before SIGKILL."""
        assert record.drain is not None
        killed = set(record.drain.killed) - set(record.drain.settled)
        end = time.monotonic() + KILL_SETTLE_S
        while killed and time.monotonic() < end:
            if not any(j.job_id in killed and j.state in LIVE for j in self.on_node(record)):
                return
            time.sleep(0.1)
