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


@dataclass(frozen=True, slots=True)
class QueuedJob:
    """One line of `squeue`: what slurmctld says of one job now."""

    job_id: str
    name: str
    state: str  # PENDING, RUNNING, COMPLETING, COMPLETED, CANCELLED, FAILED, NODE_FAIL, ...
    reason: str
    nodes: str


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

    def update(self, kind: str, fields: Mapping[str, str], *, what: str) -> None:
        """`scontrol update Kind=… Key=Value …` (a value may hold spaces: one argv each)."""
        self.run(["scontrol", "update", *(f"{k}={v}" for k, v in fields.items())], what=what)


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
