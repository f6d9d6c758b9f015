"""The node provider's records: one small JSON file per cluster node, in a state directory.

Why a record of our own, and not only Slurm's view: Slurm keeps a node's drain and Reason across
restarts, but `scontrol reconfigure` (or a slurmctld restart from slurm.conf) drops partitions
made with `scontrol create` and features set with `scontrol update` (measured on 22.05). The
record is what the provider knows it made true (host, partition, feature, drain, and the jobs it
signalled, killed or requeued), so it can make it true again, and a restarted control plane
continues a drain where the last one stopped. Records are written whole (rename of a temporary
file): a reader sees a record complete or not at all.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from lowcostgpu.domain.errors import InvalidRequest

_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9@.:_-]{0,127}")


@dataclass(frozen=True, slots=True)
class Drain:
    """A node's drain: its deadline (epoch seconds) and reason, and what it did to each job.

    `jobs`: every job of the cluster seen running on the node since the cordon, with its Slurm
    restart count then (a job requeued since is not ours to requeue again); `signalled`: sent
    SIGTERM; `killed`: sent SIGKILL at the deadline; `settled`: requeued, or left as it ended
    (exit 0, cancelled by its owner, not requeueable)."""

    deadline: int
    reason: str
    jobs: dict[str, int] = field(default_factory=dict)
    signalled: tuple[str, ...] = ()
    killed: tuple[str, ...] = ()
    settled: tuple[str, ...] = ()
    requeued: tuple[str, ...] = ()

    def seen(self, job_id: str, restarts: int) -> Drain:
        if job_id in self.jobs:
            return self
        return replace(self, jobs={**self.jobs, job_id: restarts})

    def with_signalled(self, job_id: str) -> Drain:
        return replace(self, signalled=_added(self.signalled, job_id))

    def with_killed(self, job_id: str) -> Drain:
        return replace(self, killed=_added(self.killed, job_id))

    def with_settled(self, job_id: str, requeued: bool) -> Drain:
        again = _added(self.requeued, job_id) if requeued else self.requeued
        return replace(self, settled=_added(self.settled, job_id), requeued=again)

    @property
    def unsettled(self) -> list[str]:
        return [j for j in self.jobs if j not in self.settled]


@dataclass(frozen=True, slots=True)
class NodeRecord:
    """One cluster node as the provider made it: a whole Slurm node (`host`) in the cluster's
    partition (`partition`), with the `preemptible` feature when `preemptible`."""

    node_id: str
    cluster_id: str
    allocation_id: str
    host: str
    preemptible: bool
    partition: str
    added_at: float
    drain: Drain | None = None


class NodeRecords:
    """The records of one control plane, in `directory` (created if missing)."""

    def __init__(self, directory: Path | str) -> None:
        self.directory = Path(directory).resolve()
        self.directory.mkdir(parents=True, exist_ok=True)

    def get(self, node_id: str) -> NodeRecord | None:
        check_id(node_id, "node id")
        return _load(self.directory / f"{node_id}.json")

    def all(self) -> list[NodeRecord]:
        """Every record, by node id: O(records) file reads."""
        found = (_load(p) for p in sorted(self.directory.glob("*.json")))
        return [r for r in found if r is not None]

    def by_allocation(self, allocation_id: str) -> NodeRecord | None:
        return next((r for r in self.all() if r.allocation_id == allocation_id), None)

    def on_host(self, host: str) -> list[NodeRecord]:
        return [r for r in self.all() if r.host == host]

    def put(self, record: NodeRecord) -> None:
        check_id(record.node_id, "node id")
        path = self.directory / f"{record.node_id}.json"
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(asdict(record), sort_keys=True) + "\n")
        os.replace(tmp, path)

    def put_drain(self, record: NodeRecord, drain: Drain) -> NodeRecord:
        """`record` with `drain`, written only if that changes it."""
        if drain == record.drain:
            return record
        record = replace(record, drain=drain)
        self.put(record)
        return record

    def delete(self, node_id: str) -> None:
        check_id(node_id, "node id")
        (self.directory / f"{node_id}.json").unlink(missing_ok=True)


def members(records: Iterable[NodeRecord], partition: str) -> list[str]:
    """The hosts the records put in `partition`, sorted."""
    return sorted({r.host for r in records if r.partition == partition})


def check_id(value: str, what: str) -> None:
    """Ids name files and Slurm partitions: nothing that could leave the directory."""
    if not _ID.fullmatch(value):
        raise InvalidRequest(
            f"{what} {value!r} is not valid for Slurm cluster nodes",
            hint="use letters, digits and '@.:_-' (at most 128 characters)",
        )


def _added(items: tuple[str, ...], item: str) -> tuple[str, ...]:
    return items if item in items else (*items, item)


def _load(path: Path) -> NodeRecord | None:
    try:
        data: dict[str, Any] = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    drain = data.pop("drain", None)
    record = NodeRecord(**data)
    if drain is None:
        return record
    for name in ("signalled", "killed", "settled", "requeued"):
        drain[name] = tuple(drain.get(name, ()))
    return replace(record, drain=Drain(**drain))
