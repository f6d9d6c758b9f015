"""The Slurm runtime: an instance's run is a Slurm job in a partition lowcostgpu owns.

lowcostgpu keeps the queue, the victim choice and the drain's timing; Slurm runs the work. The
partition's own preemption is off (`PreemptMode=OFF`): Slurm's would restart a requeued job "as if
it was never running", treat `GraceTime` as a lower bound, signal only steps, and end a job that
exits in its grace COMPLETED (docs/slurm.md).

- `start`: `sbatch` pinned to the allocation's host (`-w`), `--gres=gpu:N`, named
  `lcg-<allocation id>` so that a start replayed after a crash finds the job instead of
  submitting twice (a directory per allocation, made first, is the claim). The workload runs as
  a step under `srun` in the batch script of `batch.py`, which records its exit code on the
  shared filesystem. A requeued run is a new allocation: a new job on the same volume.
- `signal` (SIGTERM): `scancel --signal=TERM` to the job's steps. `kill`: SIGKILL to the steps
  (`scancel --signal=KILL JOB` would be a cancel: SIGTERM first, SIGKILL `KillWait` later), the
  batch shell too if no step runs yet. A pending job is cancelled (it has not run: nothing to
  save).
- `observe`: the records in each allocation's directory, plus one `squeue` of the partition for
  the runs that have none yet (pending, running, or gone from Slurm without a record).

Cost: `observe` is O(allocations kept) file reads and one `squeue` call of O(jobs of the
partition); `start`, `signal` and `kill` are one or two Slurm calls each.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Literal, Protocol

from lowcostgpu.adapters.local.state import check_allocation_id as check_id
from lowcostgpu.adapters.slurm import batch
from lowcostgpu.adapters.slurm.cli import QueuedJob, Slurm
from lowcostgpu.domain.errors import Conflict, InvalidRequest, NotFound
from lowcostgpu.ports.runtime import WorkloadReport, WorkloadStart, check_command

INHERITED_ENV = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ")
_ENDED = frozenset(
    {
        "COMPLETED",
        "CANCELLED",
        "FAILED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "BOOT_FAIL",
        "DEADLINE",
        "OUT_OF_MEMORY",
        "REVOKED",
        "SPECIAL_EXIT",
    }
)
_PENDING = frozenset({"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "RESV_DEL_HOLD"})
SUBMIT_AGAIN_REASON = "the control plane stopped during start; start() again submits the job"


class NodeAllocations(Protocol):
    """Cluster nodes' allocations (`nodes.SlurmNodes`): the core signals, kills and observes a
    node's allocation like a workload's; the runtime hands those to the node provider."""

    def owns(self, allocation_id: str) -> bool: ...

    def signal(self, allocation_id: str) -> None: ...

    def kill(self, allocation_id: str) -> None: ...

    def reports(self) -> list[WorkloadReport]: ...


def check_allocation_id(allocation_id: str) -> None:
    """Allocation ids name directories and jobs (the local runtime's rule)."""
    check_id(allocation_id, "Slurm")


class SlurmRuntime:
    """`ports.runtime.Runtime` over one partition of one Slurm cluster.

    `state_dir` must be on a filesystem every node of the partition mounts at the same path
    (the runs' records and logs live there)."""

    def __init__(
        self,
        slurm: Slurm,
        state_dir: Path | str,
        *,
        partition: str = "lowcostgpu",
        base_env: Mapping[str, str] | None = None,
        nodes: NodeAllocations | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.slurm = slurm
        self.nodes = nodes
        self.partition = partition
        self.clock = clock
        self._dir = Path(state_dir).resolve()
        self._dir.mkdir(parents=True, exist_ok=True)
        self._base_env = dict(base_env) if base_env is not None else _inherited_env()
        # Job names carry which plane submitted them: two planes (or test runs) sharing a
        # partition never take each other's job for their own.
        plane = hashlib.sha256(str(self._dir).encode()).hexdigest()[:8]
        self._job_prefix = f"{batch.JOB_NAME_PREFIX}{plane}-"

    @property
    def state_dir(self) -> Path:
        return self._dir

    def gang_address(self, gang_id: str, master_host_id: str) -> str:
        """Where a gang's members reach its rank-0 member: the node's `NodeAddr` as Slurm knows
        it (each member is its own job, pinned to its own node; `scontrol show node`)."""
        return self.slurm.node_fields(master_host_id).get("NodeAddr") or master_host_id

    def start(self, start: WorkloadStart) -> None:
        check_allocation_id(start.allocation_id)
        check_command(start)
        directory = self._dir / start.allocation_id
        directory.mkdir(exist_ok=True)
        with _locked(directory):
            if _read(directory / batch.JOB_FILE) is not None:
                return  # submitted before
            found = self._job_named(start.allocation_id)
            if found is not None:  # submitted, then the server stopped before recording it
                _write(directory / batch.JOB_FILE, found.job_id)
                return
            self._write_spec(directory, start)
            job_id = self.slurm.submit(
                self._sbatch_args(start, directory),
                batch.batch_script(
                    str(directory), self._cwd(start, directory), start.argv, start.allocation_id
                ),
                what=f"submitting workload {start.allocation_id} to host {start.host_id}",
            )
            _write(directory / batch.JOB_FILE, job_id)

    def signal(self, allocation_id: str, signal: Literal["SIGTERM"]) -> None:
        if signal != "SIGTERM":
            raise InvalidRequest(f"signal {signal!r} is not supported", hint="send 'SIGTERM'")
        if self.nodes is not None and self.nodes.owns(allocation_id):
            self.nodes.signal(allocation_id)
            return
        self._deliver(allocation_id, batch.SIGTERM_MARK, "TERM")

    def kill(self, allocation_id: str) -> None:
        if self.nodes is not None and self.nodes.owns(allocation_id):
            self.nodes.kill(allocation_id)
            return
        self._deliver(allocation_id, batch.KILLED_MARK, "KILL")

    def observe(self) -> list[WorkloadReport]:
        directories = sorted(
            (e for e in os.scandir(self._dir) if e.is_dir() and not e.name.startswith(".")),
            key=lambda e: e.name,
        )
        reports: list[WorkloadReport] = []
        undecided: list[Path] = []
        for entry in directories:
            directory = Path(entry.path)
            final = _final_report(directory)
            if final is not None:
                reports.append(final)
            elif (directory / batch.SPEC_FILE).exists() or (directory / batch.JOB_FILE).exists():
                undecided.append(directory)
        if undecided:
            jobs = {j.name: j for j in self.slurm.jobs(self.partition)}
            for directory in undecided:
                job = jobs.get(self._job_prefix + directory.name)
                reports.append(self._live_report(directory, job))
        if self.nodes is not None:
            reports += self.nodes.reports()
        return sorted(reports, key=lambda r: r.allocation_id)

    def forget(self, allocation_id: str) -> None:
        """Drop an ended run's records (its log goes with them: see `logs`)."""
        check_allocation_id(allocation_id)
        directory = self._dir / allocation_id
        if not directory.exists():
            return
        report = _final_report(directory)
        if report is None:
            live = self._live_report(directory, self._job_named(allocation_id))
            if live.phase != "exited":
                raise Conflict(
                    f"workload {allocation_id} is still {live.phase}; it cannot be forgotten yet",
                    hint="signal or kill it, and forget it once observe() reports it exited",
                )
        keep = self._dir / ".logs"
        keep.mkdir(exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            os.replace(directory / batch.LOG_FILE, keep / f"{allocation_id}.log")
        shutil.rmtree(directory, ignore_errors=True)

    def logs(self, allocation_id: str, tail_bytes: int = 65536) -> str:
        check_allocation_id(allocation_id)
        for path in (
            self._dir / allocation_id / batch.LOG_FILE,
            self._dir / ".logs" / f"{allocation_id}.log",
        ):
            try:
                with open(path, "rb") as f:
                    size = f.seek(0, os.SEEK_END)
                    f.seek(max(0, size - max(0, tail_bytes)))
                    return f.read().decode("utf-8", errors="replace")
            except FileNotFoundError:
                continue
        if (self._dir / allocation_id).exists():
            return ""
        raise NotFound(f"no workload {allocation_id} on this runtime")

    # -- internals -----------------------------------------------------------------------------

    def _sbatch_args(self, start: WorkloadStart, directory: Path) -> list[str]:
        return [
            f"--partition={self.partition}",
            f"--nodelist={start.host_id}",
            "--nodes=1",
            "--ntasks=1",
            *([f"--gres=gpu:{len(start.gpu_indices)}"] if start.gpu_indices else []),
            f"--job-name={self._job_prefix}{start.allocation_id}",
            f"--comment=lowcostgpu instance {start.instance_id}",
            f"--output={directory / batch.LOG_FILE}",
            "--open-mode=append",
            "--no-requeue",  # a requeue is lowcostgpu's: a new job, on the same volume
            "--export=NONE",  # the environment comes from env.sh, not from this server
            f"--chdir={directory}",
        ]

    def _cwd(self, start: WorkloadStart, directory: Path) -> str:
        if start.volume is not None:
            return start.volume.path
        work = directory / "work"
        work.mkdir(exist_ok=True)
        return str(work)

    def _write_spec(self, directory: Path, start: WorkloadStart) -> None:
        env = {**self._base_env, **start.env}
        if start.volume is not None:
            env["LOWCOSTGPU_VOLUME"] = start.volume.path
        env_path = directory / batch.ENV_FILE
        fd = os.open(env_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(batch.env_file(env))
        spec = {
            "instance_id": start.instance_id,
            "host_id": start.host_id,
            "gpus": len(start.gpu_indices),
            "restart_count": start.restart_count,
            "argv": list(start.argv),
            "at": self.clock(),
        }
        _write(directory / batch.SPEC_FILE, json.dumps(spec))

    def _deliver(self, allocation_id: str, mark: str, signal: str) -> None:
        """Mark the allocation (the batch shell reads the mark before it starts the step), then
        signal the job: its steps if it runs, a cancel if it still waits for its host."""
        check_allocation_id(allocation_id)
        directory = self._dir / allocation_id
        if not directory.exists() or _final_report(directory) is not None:
            return
        _write(directory / mark, str(self.clock()))
        job_id = _read(directory / batch.JOB_FILE)
        if job_id is None:
            return
        job = self._job_named(allocation_id)
        if job is None or job.state in _ENDED:
            return
        if job.state in _PENDING:
            self.slurm.cancel(job_id)
        elif signal == "TERM":
            self.slurm.signal(job_id, signal)
        elif not self.slurm.kill_steps(job_id):  # its step not started (or over): the shell too
            self.slurm.kill_job(job_id)

    def _job_named(self, allocation_id: str) -> QueuedJob | None:
        name = self._job_prefix + allocation_id
        found = [j for j in self.slurm.jobs(self.partition, names=name) if j.name == name]
        return max(found, key=lambda j: int(j.job_id)) if found else None

    def _live_report(self, directory: Path, job: QueuedJob | None) -> WorkloadReport:
        """The report of a run with no final record, from Slurm's view of its job."""
        spec = _spec(directory)
        alloc, instance = directory.name, str(spec.get("instance_id", ""))
        started = _read(directory / batch.STARTED)
        if job is None:
            if _read(directory / batch.JOB_FILE) is None:
                return WorkloadReport(alloc, instance, "starting", None, SUBMIT_AGAIN_REASON)
            gone = "exit status unknown: the job is gone from Slurm without an exit record"
            return WorkloadReport(alloc, instance, "exited", None, gone, at=int(self.clock()))
        if job.state in _ENDED:
            code = _signal_code(directory, job.state)
            reason = f"Slurm job {job.job_id} ended {job.state} without an exit record"
            return WorkloadReport(alloc, instance, "exited", code, reason, int(self.clock()))
        if started is not None:
            return WorkloadReport(alloc, instance, "running", at=_seconds(started))
        reason = f"Slurm job {job.job_id} is {job.state.lower()}"
        if job.reason and job.reason != "None":
            reason += f" ({job.reason})"
        return WorkloadReport(alloc, instance, "starting", None, reason, _seconds(spec.get("at")))


def _final_report(directory: Path) -> WorkloadReport | None:
    """The report of a run whose batch shell left an exit or a start failure; else None."""
    spec = _spec(directory)
    alloc, instance = directory.name, str(spec.get("instance_id", ""))
    failed = _read(directory / batch.START_FAILED)
    if failed is not None:
        tried_at = _seconds(spec.get("at"))
        return WorkloadReport(alloc, instance, "start_failed", None, failed, tried_at)
    ended = _read(directory / batch.EXIT)
    if ended is None:
        return None
    code, _, at = ended.partition(" ")
    return WorkloadReport(alloc, instance, "exited", int(code), "", _seconds(at))


def _signal_code(directory: Path, state: str) -> int | None:
    """A job that ended before its batch shell could record an exit: 137 if we killed it (the
    shell too, when its step had not started), 143 if we cancelled it pending at a SIGTERM;
    else unknown."""
    if (directory / batch.KILLED_MARK).exists():
        return 137
    cancelled = state == "CANCELLED" and (directory / batch.SIGTERM_MARK).exists()
    return 143 if cancelled else None


def _seconds(value: object) -> int | None:
    """A recorded epoch time (the batch shell's `$EPOCHREALTIME`, a float) as whole seconds."""
    try:
        return int(float(str(value))) if value not in (None, "") else None
    except ValueError:
        return None


def _spec(directory: Path) -> dict[str, object]:
    text = _read(directory / batch.SPEC_FILE)
    return json.loads(text) if text else {}


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        return None


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text + "\n")
    os.replace(tmp, path)


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    fd = os.open(directory / ".lock", os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _inherited_env() -> dict[str, str]:
    return {name: os.environ[name] for name in INHERITED_ENV if name in os.environ}
