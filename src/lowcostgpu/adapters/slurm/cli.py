"""Slurm's commands, run as subprocesses: the one place that speaks to slurmctld.

Slurm 22.05 has no usable Python binding (pyslurm does not build against it) and no event stream;
its commands are the stable interface (`squeue`, `sinfo`, `scontrol`, `sbatch`, `scancel`). Every
call has a timeout, and every failure is one of our errors, naming the command and what Slurm
said: `Unavailable` when slurmctld cannot be reached (retried by the outbox), `InvalidRequest`
when Slurm refuses what was asked.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from lowcostgpu.domain.errors import InvalidRequest, NotFound, Unavailable

TIMEOUT_S = 30.0
_UNREACHABLE = (
    "unable to contact slurm controller",
    "socket timed out",
    "connection refused",
    "zero bytes were transmitted",
    "munge",
)
_GONE = ("invalid job id", "already completing or completed", "job/step already completing")
# scancel may exit with Slurm's error number (mod 256) and print nothing: ESLURM_INVALID_JOB_ID
# (2017) and ESLURM_ALREADY_DONE (2021), seen when a signal races the job's end.
_GONE_EXIT_CODES = {2017 % 256: "invalid job id", 2021 % 256: "already completing or completed"}


@dataclass(frozen=True, slots=True)
class QueuedJob:
    """One line of `squeue`: what slurmctld says of one job now."""

    job_id: str
    name: str
    state: str  # PENDING, RUNNING, COMPLETING, COMPLETED, CANCELLED, FAILED, NODE_FAIL, ...
    reason: str
    nodes: str


@dataclass(frozen=True, slots=True)
class NodeJob:
    """A job as the node provider needs it (`jobs_on`): its state, how often Slurm requeued it
    (`restarts`: a job requeued since we saw it is not ours to requeue again) and whether it
    may be requeued at all (`sbatch --requeue`, or the cluster's `JobRequeue=1`)."""

    job_id: str
    state: str
    restarts: int
    requeue: bool
    partition: str


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """One node of `sinfo`, as lowcostgpu needs it: its name, GPUs, state and partitions."""

    name: str
    gpus: int
    state: str
    partitions: tuple[str, ...]
    features: tuple[str, ...]
    reason: str


class Slurm:
    """Runs Slurm's commands against one cluster (`SLURM_CONF`, or the system's default)."""

    def __init__(self, conf: Path | str | None = None, *, timeout_s: float = TIMEOUT_S) -> None:
        self.conf = str(conf) if conf is not None else os.environ.get("SLURM_CONF")
        self.timeout_s = timeout_s

    @property
    def where(self) -> str:
        return f"the Slurm cluster of {self.conf}" if self.conf else "the Slurm cluster"

    def run(self, argv: Sequence[str], *, what: str, input_text: str | None = None) -> str:
        """Run one command; its stdout, or our error saying what failed and why."""
        env = dict(os.environ)
        if self.conf:
            env["SLURM_CONF"] = self.conf
        try:
            done = subprocess.run(
                list(argv),
                input=input_text,
                capture_output=True,
                text=True,
                env=env,
                timeout=self.timeout_s,
                check=False,
            )
        except FileNotFoundError:
            raise Unavailable(
                f"{argv[0]} is not installed here: {what} needs Slurm's client commands",
                hint="install slurm-client (Debian) or put Slurm's bin directory on PATH",
            ) from None
        except subprocess.TimeoutExpired:
            raise Unavailable(
                f"{what}: {argv[0]} did not answer within {self.timeout_s:.0f} s",
                hint=f"check that slurmctld of {self.where} is up (`scontrol ping`)",
            ) from None
        if done.returncode != 0:
            said = (done.stderr or done.stdout).strip().splitlines()
            message = said[-1] if said else f"exit code {done.returncode}"
            if not said and done.returncode in _GONE_EXIT_CODES:
                message = f"{_GONE_EXIT_CODES[done.returncode]} (exit code {done.returncode})"
            lowered = message.lower()
            if any(text in lowered for text in _UNREACHABLE):
                raise Unavailable(
                    f"{what}: slurmctld cannot be reached: {message}",
                    hint=f"check that slurmctld of {self.where} is up (`scontrol ping`)",
                )
            if any(text in lowered for text in _GONE):
                raise NotFound(f"{what}: {message}")
            raise InvalidRequest(f"{what}: Slurm refused it: {message}")
        return done.stdout

    # -- jobs ----------------------------------------------------------------------------------

    def submit(self, argv: Sequence[str], script: str, *, what: str) -> str:
        """`sbatch --parsable`: the new job's id."""
        out = self.run(["sbatch", "--parsable", *argv], what=what, input_text=script)
        return out.strip().split(";")[0]

    def jobs(self, partition: str, *, names: str | None = None) -> list[QueuedJob]:
        """Every job of `partition` slurmctld still holds (finished ones for `MinJobAge`): one
        `squeue` call, O(jobs of the partition)."""
        argv = ["squeue", "-h", "-a", "-t", "all", "-p", partition, "-o", "%i|%j|%T|%r|%N"]
        if names is not None:
            argv += ["-n", names]
        out = self.run(argv, what=f"listing the jobs of partition {partition}")
        found = []
        for line in out.splitlines():
            parts = line.split("|")
            if len(parts) == 5:
                found.append(QueuedJob(*(p.strip() for p in parts)))
        return found

    def signal(self, job_id: str, signal: str, *, batch: bool = False) -> None:
        """`scancel --signal`: to the job's steps (srun), or with `batch` to its batch shell only.
        A job that has already ended is not an error (its end raced the signal)."""
        argv = ["scancel", f"--signal={signal}", *(["--batch"] if batch else []), job_id]
        with contextlib.suppress(NotFound):
            self.run(argv, what=f"sending {signal} to Slurm job {job_id}")

    def cancel(self, job_id: str) -> None:
        """`scancel`: end a job, pending or running; an ended one is left as it is."""
        with contextlib.suppress(NotFound):
            self.run(["scancel", job_id], what=f"cancelling Slurm job {job_id}")

    def kill_job(self, job_id: str) -> None:
        """SIGKILL now to every step, then to the batch shell. Not `scancel --signal=KILL JOB`
        (with or without `--full`): Slurm takes a SIGKILL to a job for a cancel and sends
        SIGTERM first, then SIGKILL `KillWait` later (measured on 22.05: a job whose step traps
        SIGTERM took 7.4 s to end under the lab's KillWait=5; killed step by step, 0.5 s).
        Steps first: once the batch shell is gone the job ends, and Slurm's own end sends
        SIGTERM to steps still running. A job that has already ended is not an error."""
        self.kill_steps(job_id)
        try:
            self.run(
                ["scancel", "--batch", "--signal=KILL", job_id],
                what=f"killing the batch shell of Slurm job {job_id}",
            )
        except NotFound:
            pass
        except InvalidRequest as exc:
            if not no_batch_shell(exc):
                raise

    def kill_steps(self, job_id: str) -> bool:
        """SIGKILL now to the job's steps (srun), not to its batch shell; False if it has none
        running (it has not started one yet, or it has ended)."""
        steps = [s for s in self.steps(job_id) if s.rpartition(".")[2] not in ("batch", "extern")]
        if steps:
            with contextlib.suppress(NotFound):  # a step that ended meanwhile
                self.run(["scancel", "--signal=KILL", *steps], what=f"killing job {job_id}'s steps")
        return bool(steps)

    def steps(self, job_id: str) -> list[str]:
        """The job's running steps (`squeue -s`): `<job>.<step>`, `<job>.batch`, `<job>.extern`."""
        out = self.run(
            ["squeue", "-h", "-s", "-j", job_id, "-o", "%i"], what=f"listing job {job_id}'s steps"
        )
        return [line.strip() for line in out.splitlines() if line.strip()]

    def requeue(self, job_id: str) -> bool:
        """`scontrol requeue`: a running or ended batch job goes back to pending (Slurm makes it
        eligible `cred_expire` + 1 s later, 121 s by default). False if the job may not be
        requeued (`--no-requeue`, or `JobRequeue=0` and no `--requeue`) or Slurm forgot it."""
        try:
            self.run(["scontrol", "requeue", job_id], what=f"requeueing Slurm job {job_id}")
        except NotFound:
            return False
        except InvalidRequest as exc:
            if "presently disabled" in str(exc).lower():
                return False
            raise
        return True

    def jobs_on(self, host: str, partitions: Sequence[str]) -> list[NodeJob]:
        """Every job of `partitions` slurmctld holds that runs or ran on `host` (ended ones for
        `MinJobAge`): one `squeue` call, O(those jobs)."""
        argv = ["squeue", "-h", "-a", "-t", "all", "-w", host, "-p", ",".join(partitions)]
        argv += ["-O", "JobId:|,State:|,RestartCnt:|,Requeue:|,Partition:|"]
        out = self.run(argv, what=f"listing the jobs on Slurm node {host}")
        found = []
        for line in out.splitlines():
            parts = [p.strip() for p in line.split("|")]
            if len(parts) >= 5 and parts[2].isdigit():
                requeue = parts[3] == "1"
                found.append(NodeJob(parts[0], parts[1], int(parts[2]), requeue, parts[4]))
        return found

    def job_fields(self, job_id: str) -> dict[str, str] | None:
        """`scontrol show job -o`: the job's key=value fields, None once slurmctld forgot it."""
        try:
            out = self.run(["scontrol", "show", "job", "-o", job_id], what=f"reading job {job_id}")
        except (NotFound, InvalidRequest):
            return None
        return _key_values(out)

    # -- nodes ---------------------------------------------------------------------------------

    def nodes(self) -> list[NodeInfo]:
        """Every node of the cluster with its GPU count (`sinfo -N`, one line per partition)."""
        out = self.run(
            ["sinfo", "-h", "-N", "-a", "-o", "%N|%G|%T|%R|%f|%E"], what="listing the Slurm nodes"
        )
        merged: dict[str, NodeInfo] = {}
        for line in out.splitlines():
            parts = [p.strip() for p in line.split("|")]
            if len(parts) != 6:
                continue
            name, gres, state, partition, features, reason = parts
            seen = merged.get(name)
            partitions = (*(seen.partitions if seen else ()), partition)
            merged[name] = NodeInfo(
                name=name,
                gpus=gpus_of_gres(gres),
                state=state,
                partitions=partitions,
                features=tuple(f for f in features.split(",") if f and f != "(null)"),
                reason="" if reason in ("none", "(null)") else reason,
            )
        return [merged[name] for name in sorted(merged)]

    def node_fields(self, name: str) -> dict[str, str]:
        """`scontrol show node -o`: the node's key=value fields (a value with spaces, such as a
        Reason, is cut at its first space: read those from `nodes`)."""
        out = self.run(["scontrol", "show", "node", "-o", name], what=f"reading Slurm node {name}")
        return _key_values(out)

    def node_comment(self, name: str) -> str:
        """The node's free-text `Comment` whole (`sinfo -O Comment`; "" for none)."""
        out = self.run(
            ["sinfo", "-h", "-N", "-n", name, "-O", "Comment:1000"],
            what=f"reading the comment of Slurm node {name}",
        )
        lines = out.splitlines()
        comment = lines[0].strip() if lines else ""
        return "" if comment == "(null)" else comment

    def partitions(self) -> set[str]:
        """The names of every partition, empty ones too (`sinfo -a -o %R`)."""
        out = self.run(["sinfo", "-h", "-a", "-o", "%R"], what="listing the Slurm partitions")
        return {line.strip() for line in out.splitlines() if line.strip()}

    def create_partition(self, name: str, nodes: Sequence[str]) -> None:
        """`scontrol create PartitionName=…`: up, no time limit, Slurm's preemption off (the
        control plane decides victims and times drains). Lost at `scontrol reconfigure` unless
        slurm.conf declares it: the node provider makes it again."""
        fields = {
            "PartitionName": name,
            "Nodes": ",".join(nodes),
            "State": "UP",
            "MaxTime": "INFINITE",
            "PreemptMode": "OFF",
        }
        self.run(
            ["scontrol", "create", *(f"{k}={v}" for k, v in fields.items())],
            what=f"creating Slurm partition {name}",
        )

    def update(self, kind: str, fields: Mapping[str, str], *, what: str) -> None:
        """`scontrol update Kind=… Key=Value …` (a value may hold spaces: one argv each)."""
        self.run(["scontrol", "update", *(f"{k}={v}" for k, v in fields.items())], what=what)


def no_batch_shell(exc: InvalidRequest) -> bool:
    """Whether Slurm refused a `--batch` signal because the job has no batch shell (an
    interactive `srun` or `salloc` job: "Job script not specified")."""
    return "job script not specified" in str(exc).lower()


def gpus_of_gres(gres: str) -> int:
    """The GPU count of a gres string such as `gpu:4`, `gpu:a100:8(S:0-1)`, `(null)`."""
    total = 0
    for item in gres.split(","):
        parts = item.split("(")[0].split(":")
        if parts[0] == "gpu" and len(parts) >= 2 and parts[-1].isdigit():
            total += int(parts[-1])
    return total


def _key_values(text: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    for token in text.split():
        key, sep, value = token.partition("=")
        if sep:
            fields[key] = value
    return fields
