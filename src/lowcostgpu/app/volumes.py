"""Volumes of an account: list, show, delete, grow; and what a launch or a checkpoint does to one.

A volume is made by the first launch that names it with a size and lives until its owner deletes
it; storage is billed while it exists, at the size of each moment (`VolumeRecord.history`, cut
by `app.meter`). Deleting and growing are decisions like a launch: decided under the plane's lock
on the volumes it keeps in memory (the meter's, loaded once), written in one commit with an
event and an outbox entry (`DeleteVolume`, `ResizeVolume`), and carried out on the runtime's
volumes after the commit (`app.effects`), idempotently.

A volume is in use while a non-deleted instance of its account names it (a stopped instance
may be resumed onto it): deleting it then is a `Conflict` naming (the first few of) those
instances, which are the caller's own. Its users are looked up per volume through the store's
index of them (`Store.instances_naming_volume`): a view costs the ids it shows, a delete's
decision at most SHOWN_USERS + 1 ids, never the account's history of instances. Another
account's volume of the same name is another volume: never seen, never named (a lookup is by
(account, name)).

This module does not import `app.plane` (an import-linter contract): the plane builds the
service and hands it its `decide` and its volumes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from lowcostgpu.app.decisions import Decision
from lowcostgpu.core.engine import EngineState, EngineStep
from lowcostgpu.core.lifecycle import (
    CheckpointReported,
    CompletionReported,
    InstanceState,
    LifecycleEvent,
)
from lowcostgpu.domain.capacity import Timestamp
from lowcostgpu.domain.errors import Conflict, InvalidRequest, NotFound
from lowcostgpu.domain.events import Reason, event_type_of
from lowcostgpu.domain.volumes import check_size_gb, check_volume_name
from lowcostgpu.ports.store import EventRecord, Store
from lowcostgpu.ports.store_records import Commit, LaunchRecord, OutboxEntry
from lowcostgpu.ports.store_records import VolumeRecord as VolumeRecord

Known = Mapping[tuple[str, str], VolumeRecord]
"""The volumes the plane keeps, by (account, name), deleted ones too (their usage is billed)."""
Decide = Callable[[Callable[[EngineState, Timestamp], Decision]], Commit]
"""The plane's way to decide and write (`app.decider.Decider.decide_and_write`)."""

SHOWN_USERS = 5  # of the instances that keep a volume in use, the ones an error names


@dataclass(frozen=True, slots=True)
class VolumeView:
    """A volume as its owner sees it."""

    name: str
    size_gb: int
    created_at: Timestamp
    resized_at: Timestamp | None  # the last resize, None if it never was
    in_use_by: tuple[str, ...]  # the account's own non-deleted instances naming it, by id
    checkpoint_step: int | None  # the last step a workload on it reported; None: none known


def _missing(name: str) -> NotFound:
    """The same answer for a volume of another account as for one that does not exist."""
    return NotFound(f"no volume {name}", hint="`lowcostgpu volumes ls` lists yours")


def view_of(v: VolumeRecord, users: Sequence[str]) -> VolumeView:
    """`users`: the ids of the instances that name it (`Store.instances_naming_volume`)."""
    # A resize's segment starts in this life; a deleted namesake's ended before it began.
    last = v.history[-1] if v.history else None
    resized_at = last[1] if last is not None and last[0] >= v.created_at else None
    return VolumeView(v.name, v.size_gb, v.created_at, resized_at, tuple(users), v.checkpoint_step)


def alive(known: Known, account_id: str, name: str) -> VolumeRecord | None:
    """The account's volume of that name if it exists (not deleted)."""
    v = known.get((account_id, name))
    return v if v is not None and v.deleted_at is None else None


class VolumeService:
    """The volume requests of the API, decided through the plane."""

    def __init__(self, *, store: Store, decide: Decide, known: Callable[[], Known]) -> None:
        """`known`: the plane's volumes, called only inside a decision (under its lock)."""
        self.store = store
        self._decide = decide
        self._known = known

    def list(self, account_id: str) -> list[VolumeView]:
        """The account's volumes by name. Cost: its volumes, and one index lookup per volume
        that reads the ids it shows (the instances naming it)."""
        found = [v for v in self.store.volumes(account_id) if v.deleted_at is None]
        return [view_of(v, self._users(account_id, v.name)) for v in found]

    def get(self, account_id: str, name: str) -> VolumeView:
        v = self._stored(account_id, name)
        return view_of(v, self._users(account_id, name))

    def _users(self, account_id: str, name: str) -> Sequence[str]:
        return self.store.instances_naming_volume(account_id, name)

    def held_step(self, account_id: str, name: str | None) -> int | None:
        """The checkpoint step the account's volume holds (None: no volume, or none known).
        One read by the volume's key."""
        v = self.store.volume(account_id, name) if name else None
        return v.checkpoint_step if v is not None and v.deleted_at is None else None

    def _stored(self, account_id: str, name: str) -> VolumeRecord:
        check_volume_name(name)
        v = self.store.volume(account_id, name)
        if v is None or v.deleted_at is not None:
            raise _missing(name)
        return v

    def delete(self, account_id: str, name: str) -> VolumeView:
        """Deleted now (billing stops), its data removed after the commit; refused while an
        instance of the account names it."""
        check_volume_name(name)

        def decide(state: EngineState, now: Timestamp) -> Decision:
            v = alive(self._known(), account_id, name)
            if v is None:
                raise _missing(name)
            # Under the plane's lock: only the first users, and whether there are more.
            users = self.store.instances_naming_volume(account_id, name, limit=SHOWN_USERS + 1)
            if users:
                raise in_use(name, users)
            return Decision(EngineStep(state), extra=deleted(v, now))

        self._decide(decide)
        return view_of(self._deleted(account_id, name), ())

    def _deleted(self, account_id: str, name: str) -> VolumeRecord:
        v = self.store.volume(account_id, name)
        assert v is not None, "written by the decision just committed"
        return v

    def resize(self, account_id: str, name: str, size_gb: int) -> VolumeView:
        """Grown to `size_gb` (billed at it from now on), the runtime's limit grown after the
        commit; the same size is a no-op, a smaller one refused."""
        check_volume_name(name)
        check_size_gb(size_gb)

        def decide(state: EngineState, now: Timestamp) -> Decision:
            v = alive(self._known(), account_id, name)
            if v is None:
                raise _missing(name)
            if size_gb < v.size_gb:
                raise InvalidRequest(
                    f"volume {name} is {v.size_gb} GB: it cannot shrink to {size_gb} GB",
                    hint=f"volumes only grow; give a size of at least {v.size_gb}GB, or make "
                    "a new volume and copy what you keep",
                )
            if size_gb == v.size_gb:
                return Decision(EngineStep(state))
            return Decision(EngineStep(state), extra=resized(v, size_gb, now))

        self._decide(decide)
        return self.get(account_id, name)


def deleted(v: VolumeRecord, now: Timestamp) -> Commit:
    """The commit of a delete: billed until now, the event, and the runtime's delete."""
    gone = replace(v, deleted_at=now)
    payload = {"account_id": v.account_id, "name": v.name, "deleted_at": now}
    key = f"volume:{v.account_id}/{v.name}:delete:{now}"
    words = f"volume {v.name} deleted; its storage is no longer billed"
    event = volume_event(gone, Reason.VOLUME_DELETED, words, now)
    entry = OutboxEntry(key, "DeleteVolume", payload, now)
    return Commit(volumes=[gone], events=[event], outbox=[entry])


def resized(v: VolumeRecord, size_gb: int, now: Timestamp) -> Commit:
    """The commit of a grow: the earlier size kept in the history (billed until now), the
    event, and the runtime's resize as an outbox entry."""
    history = (*v.history, (v.size_since, now, v.size_gb))  # of no length if made this second
    grown = replace(v, size_gb=size_gb, history=history)
    payload = {"account_id": v.account_id, "name": v.name, "size_gb": size_gb}
    key = f"volume:{v.account_id}/{v.name}:resize:{size_gb}:{now}"
    words = f"volume {v.name} grown from {v.size_gb} GB to {size_gb} GB, billed at that from now"
    event = volume_event(grown, Reason.VOLUME_RESIZED, words, now, previous_size_gb=v.size_gb)
    entry = OutboxEntry(key, "ResizeVolume", payload, now)
    return Commit(volumes=[grown], events=[event], outbox=[entry])


def in_use(name: str, users: Sequence[str]) -> Conflict:
    """`users`: the first ids of the instances naming it, by id; more than SHOWN_USERS of them
    say that there are more (how many is not counted: the decision reads no more than that)."""
    shown = list(users[:SHOWN_USERS])
    more = len(users) > SHOWN_USERS
    return Conflict(
        f"volume {name} is in use by {', '.join(shown)}" + (" and more" if more else ""),
        hint=f"delete {'it' if len(users) == 1 else 'them'} first (lowcostgpu rm {users[0]}): "
        "a stopped instance still names its volume"
        + (f"; `lowcostgpu volumes show {name}` lists them all" if more else ""),
        instances=shown,
        more=more,
    )


def volume_event(
    v: VolumeRecord, reason: Reason, message: str, now: Timestamp, **data: int
) -> EventRecord:
    return EventRecord(
        key=f"event:volume:{v.account_id}/{v.name}:{reason}:{now}",
        at=now,
        account_id=v.account_id,
        object_kind="volume",
        object_id=v.name,
        type=event_type_of(reason),
        reason=reason,
        message=message,
        data={"size_gb": v.size_gb, **data},
    )


# --- what a launch and a checkpoint do to a volume (inside the plane's decisions) -------------


def launched_on(known: Known, record: LaunchRecord, now: Timestamp) -> tuple[LaunchRecord, Commit]:
    """The launch record with its volume's size, and the volume it makes (with its event).

    A spec without a size attaches the existing volume (refused if there is none); a size must
    be the existing volume's (a launch never resizes, nor silently keeps another size); a new
    name, or the name of a deleted volume, makes the volume. Cost: one dictionary lookup."""
    name, size_gb = record.volume_name, record.volume_size_gb
    if not name:
        return record, Commit()
    found = alive(known, record.account_id, name)
    if found is not None:
        if size_gb is not None and size_gb != found.size_gb:
            raise Conflict(
                f"volume {name} exists with {found.size_gb} GB, not {size_gb} GB",
                hint=f"write --volume {name} or {name}:{found.size_gb}GB to attach it, or grow it "
                f"first: lowcostgpu volumes resize {name} {size_gb}GB",
            )
        return replace(record, volume_size_gb=found.size_gb), Commit()
    if size_gb is None:
        raise InvalidRequest(
            f"there is no volume {name} yet",
            hint=f"give it a size to make it, e.g. --volume {name}:50GB",
        )
    made = made_volume(known.get((record.account_id, name)), record.account_id, name, size_gb, now)
    words = f"volume {name} created ({size_gb} GB); storage is billed while it exists"
    event = volume_event(made, Reason.VOLUME_CREATED, words, now)
    return record, Commit(volumes=[made], events=[event])


def made_volume(
    before: VolumeRecord | None, account_id: str, name: str, size_gb: int, now: Timestamp
) -> VolumeRecord:
    """A new volume; one made again after a deletion keeps the deleted one's billed life in its
    history (they share a metering subject)."""
    if before is None or before.deleted_at is None:
        return VolumeRecord(account_id, name, size_gb, now)
    last = (before.size_since, before.deleted_at, before.size_gb)
    history = before.history
    if before.deleted_at > before.size_since:
        history = (*history, last)
    return VolumeRecord(account_id, name, size_gb, now, history=history)


def reports_a_step(event: LifecycleEvent) -> bool:
    """A checkpoint or a completion with its step: what moves a volume's step (a stop or a
    delete of one instance must not set back the step another run on the volume reported)."""
    return isinstance(event, CheckpointReported | CompletionReported)


def checkpoint_held(known: Known, launch: LaunchRecord, inst: InstanceState | None) -> Commit:
    """A checkpoint an instance reported is held by its volume: the volume's step follows it
    (what a later launch that attaches the volume resumes from)."""
    step = inst.last_checkpoint_step if inst is not None else None
    v = alive(known, launch.account_id, launch.volume_name) if launch.volume_name else None
    if v is None or step is None or v.checkpoint_step == step:
        return Commit()
    return Commit(volumes=[replace(v, checkpoint_step=step)])
