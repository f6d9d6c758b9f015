"""A decision, and the one store commit it becomes.

`app.decider.Decider` runs a decision on the live state (`app.live`) and writes what it
produced in one transaction: the changed instances with their expected versions, the effects as
outbox entries (carried out only after the commit) and the events. Turning a decision into that
commit is kept here, apart from the decider, because it is pure translation (no store, no clock),
and so that the cluster requests (`app.clusters`) can build a `Decision` without importing the
plane that inherits them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from lowcostgpu.core.effects import Effect, EmitEvent
from lowcostgpu.core.engine import EngineStep
from lowcostgpu.core.lifecycle import InstanceState
from lowcostgpu.domain.capacity import Timestamp
from lowcostgpu.ports.store import EventRecord
from lowcostgpu.ports.store_records import (
    Commit,
    InstanceWrite,
    LaunchRecord,
    OutboxEntry,
    StoredInstance,
)


@dataclass
class Decision:
    """What one decision produced, before it is written."""

    step: EngineStep
    launches: dict[str, LaunchRecord] = field(default_factory=dict)
    extra: Commit = field(default_factory=Commit)


def commit_of(
    decision: Decision,
    before: Mapping[str, InstanceState],
    versions: Mapping[str, int],
    now: Timestamp,
) -> Commit:
    """Instances the step touched that changed (a new one with its launch record, the others at
    the version they were read at), effects, events and extras. Cost: O(what the step touched).
    """
    writes: list[InstanceWrite] = []
    after = decision.step.state.instances
    for instance_id in sorted(decision.step.touched.instances):
        inst = after.get(instance_id)
        old = before.get(instance_id)
        if inst is None or old is inst:
            continue
        if old is None:
            writes.append(InstanceWrite(inst, None, decision.launches[inst.id]))
        elif old != inst:
            writes.append(InstanceWrite(inst, versions[instance_id]))
    events = [_event_record(e) for e in decision.step.effects if isinstance(e, EmitEvent)]
    events += decision.extra.events
    outbox = [
        OutboxEntry(e.effect_key, type(e).__name__, _payload(e), now)
        for e in decision.step.effects
        if not isinstance(e, EmitEvent)
    ]
    extra = decision.extra
    outbox += extra.outbox  # a volume's delete or resize (`app.volumes`)
    return Commit(
        instances=writes,
        outbox=outbox,
        events=events,
        usage=extra.usage,
        metered_through=extra.metered_through,
        volumes=extra.volumes,
        ledger=extra.ledger,
    )


def is_empty(commit: Commit) -> bool:
    """Whether a commit writes nothing: an idle tick does not touch the store."""
    return not (
        commit.instances
        or commit.outbox
        or commit.events
        or commit.usage
        or commit.metered_through
        or commit.volumes
        or commit.ledger
        or commit.clusters
        or commit.nodes
        or commit.accounts
        or commit.api_keys
    )


def written_instance(
    commit: Commit, instance_id: str, stored: StoredInstance | None
) -> StoredInstance:
    """The instance as the commit left it (without reading it back), or as it was read before
    the decision when the decision did not change it."""
    for w in commit.instances:
        if w.state.id == instance_id:
            version = version_after(w.expected_version)
            launch = w.launch if w.launch is not None else stored.launch if stored else None
            assert launch is not None  # a new instance is written with its launch record
            return StoredInstance(w.state, launch, version)
    assert stored is not None  # a launch always writes its instance
    return stored


def stamped(record: LaunchRecord, now: Timestamp) -> LaunchRecord:
    """The launch record with the decision's time as its creation time."""
    return LaunchRecord(**{**asdict(record), "created_at": now})


def _payload(effect: Effect) -> dict[str, Any]:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(effect).items()}


def _event_record(e: EmitEvent) -> EventRecord:
    return EventRecord(
        key=e.effect_key,
        at=e.at,
        account_id=e.account_id,
        object_kind=e.object_kind,
        object_id=e.object_id,
        type=e.event_type,
        reason=e.reason,
        message=e.message,
        data=dict(e.data),
    )


def version_after(expected_version: int | None) -> int:
    """The version a write leaves: 1 for a new row, one more than expected for an update."""
    return 1 if expected_version is None else expected_version + 1
