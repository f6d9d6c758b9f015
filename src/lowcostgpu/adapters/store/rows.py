"""Records of the port as table rows and back; shared by the SQL store and checked by its tests.

Also the checks every store makes on a commit before writing anything, so the SQL store and the
in-memory fake refuse the same malformed commits with the same errors.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from decimal import Decimal, InvalidOperation, localcontext
from typing import Any, TypeVar

from lowcostgpu.adapters.store import codec
from lowcostgpu.adapters.store.errors import StoreDataError
from lowcostgpu.core.lifecycle import InstanceState
from lowcostgpu.core.metering import UsageKind, UsageRecord
from lowcostgpu.domain.capacity import CapacityClass
from lowcostgpu.domain.errors import InvalidRequest
from lowcostgpu.domain.events import EventType, Reason
from lowcostgpu.domain.status import InstanceStatus
from lowcostgpu.ports.store import EventRecord
from lowcostgpu.ports.store_records import (
    AccountRecord,
    ApiKeyRecord,
    Commit,
    InstanceWrite,
    LaunchRecord,
    LedgerEntry,
    LedgerKind,
    OutboxEntry,
    StoredInstance,
    VolumeRecord,
)

_USAGE_KINDS = ("gpu", "storage")
_LEDGER_KINDS = ("topup", "charge", "credit")
Row = Mapping[Any, Any]  # a dict, or a SQLAlchemy RowMapping


def check_commit(commit: Commit) -> None:
    """`InvalidRequest` for a commit no store could write (a caller's bug, not a conflict)."""
    for w in commit.instances:
        if w.expected_version is None and w.launch is None:
            raise InvalidRequest(f"instance {w.state.id}: a new instance needs its launch record")
        if w.launch is not None and w.launch.instance_id != w.state.id:
            raise InvalidRequest(
                f"instance {w.state.id}: its launch record is for {w.launch.instance_id}"
            )
    for u in commit.usage:
        if u.kind not in _USAGE_KINDS:
            raise InvalidRequest(f"usage of {u.subject_id}: unknown kind {u.kind!r}")
    for subject, kind in commit.metered_through:
        if kind not in _USAGE_KINDS:
            raise InvalidRequest(f"metered_through of {subject}: unknown kind {kind!r}")
    for entry in commit.ledger:
        if entry.kind not in _LEDGER_KINDS:
            raise InvalidRequest(f"ledger entry {entry.key}: unknown kind {entry.kind!r}")
        if not isinstance(entry.amount, Decimal) or not entry.amount.is_finite():
            raise InvalidRequest(f"ledger entry {entry.key}: the amount must be a finite Decimal")


def new_instance_row(w: InstanceWrite) -> dict[str, Any]:
    """A new instance's row; `created_at` and `volume_name` are its launch's, set once (updates
    never change them: the launch record is never rewritten). "" names no volume: NULL."""
    assert w.launch is not None  # check_commit refused it otherwise
    launch = codec.dumps(w.launch)
    return {
        **instance_row(w.state),
        "version": 1,
        "launch": launch,
        "created_at": w.launch.created_at,
        "volume_name": w.launch.volume_name or None,
    }


def instance_row(state: InstanceState) -> dict[str, Any]:
    return {
        "id": state.id,
        "account_id": state.account_id,
        "status": state.status.value,
        "state": codec.dumps(state),
    }


def stored_instance(row: Row) -> StoredInstance:
    return StoredInstance(
        state=codec.loads(InstanceState, row["state"]),
        launch=codec.loads(LaunchRecord, row["launch"]),
        version=row["version"],
    )


def outbox_row(entry: OutboxEntry) -> dict[str, Any]:
    return {
        "key": entry.key,
        "kind": entry.kind,
        "payload": codec.dumps(entry.payload),
        "created_at": entry.created_at,
        "attempts": entry.attempts,
        "next_attempt_at": entry.next_attempt_at,
        "last_error": entry.last_error,
    }


def outbox_entry(row: Row) -> OutboxEntry:
    return OutboxEntry(
        key=row["key"],
        kind=row["kind"],
        payload=codec.loads(dict[str, Any], row["payload"]),
        created_at=row["created_at"],
        attempts=row["attempts"],
        next_attempt_at=row["next_attempt_at"],
        last_error=row["last_error"],
    )


def event_row(e: EventRecord, seq: int) -> dict[str, Any]:
    return {
        "seq": seq,
        "key": e.key,
        "at": e.at,
        "account_id": e.account_id,
        "object_kind": e.object_kind,
        "object_id": e.object_id,
        "type": e.type.value,
        "reason": e.reason.value,
        "message": e.message,
        "data": codec.dumps(e.data),
    }


def event_record(row: Row) -> EventRecord:
    return EventRecord(
        key=row["key"],
        at=row["at"],
        account_id=row["account_id"],
        object_kind=row["object_kind"],
        object_id=row["object_id"],
        type=codec.decode(EventType, row["type"], f"event {row['key']}.type"),
        reason=codec.decode(Reason, row["reason"], f"event {row['key']}.reason"),
        message=row["message"],
        data=codec.loads(dict[str, Any], row["data"]),
        seq=row["seq"],
    )


def usage_row(u: UsageRecord) -> dict[str, Any]:
    return {
        "subject_id": u.subject_id,
        "kind": u.kind,
        "interval_start": u.interval_start,
        "account_id": u.account_id,
        "resource": u.resource,
        "capacity_class": None if u.capacity_class is None else u.capacity_class.value,
        "interval_end": u.interval_end,
        "seconds": u.seconds,
        "quantity": u.quantity,
        "quantity_s": u.quantity_s,
    }


def usage_kind(kind: str) -> UsageKind:
    if kind == "gpu":
        return "gpu"
    if kind == "storage":
        return "storage"
    raise StoreDataError(f"unknown usage kind {kind!r} in the store")


def capacity_class(stored: str | None) -> CapacityClass | None:
    return None if stored is None else codec.decode(CapacityClass, stored, "capacity_class")


def usage_record(row: Row) -> UsageRecord:
    return UsageRecord(
        subject_id=row["subject_id"],
        account_id=row["account_id"],
        kind=usage_kind(row["kind"]),
        resource=row["resource"],
        capacity_class=capacity_class(row["capacity_class"]),
        interval_start=row["interval_start"],
        interval_end=row["interval_end"],
        seconds=row["seconds"],
        quantity=row["quantity"],
        quantity_s=row["quantity_s"],
    )


def volume_row(v: VolumeRecord) -> dict[str, Any]:
    return {
        "account_id": v.account_id,
        "name": v.name,
        "size_gb": v.size_gb,
        "created_at": v.created_at,
        "deleted_at": v.deleted_at,
        "history": json.dumps([list(s) for s in v.history]),
        "checkpoint_step": v.checkpoint_step,
    }


def volume_record(row: Row) -> VolumeRecord:
    history = tuple((int(a), int(b), int(c)) for a, b, c in json.loads(row["history"] or "[]"))
    return VolumeRecord(
        **{k: row[k] for k in _VOLUME_FIELDS},
        history=history,
        checkpoint_step=row["checkpoint_step"],
    )


_VOLUME_FIELDS = ("account_id", "name", "size_gb", "created_at", "deleted_at")
DELETED = InstanceStatus.DELETED.value


def account_row(a: AccountRecord) -> dict[str, Any]:
    return {"id": a.id, "name": a.name, "created_at": a.created_at}


def account_record(row: Row) -> AccountRecord:
    return AccountRecord(id=row["id"], name=row["name"], created_at=row["created_at"])


def api_key_row(k: ApiKeyRecord) -> dict[str, Any]:
    return {
        "key_hash": k.key_hash,
        "account_id": k.account_id,
        "prefix": k.prefix,
        "created_at": k.created_at,
    }


def api_key_record(row: Row) -> ApiKeyRecord:
    return ApiKeyRecord(
        key_hash=row["key_hash"],
        account_id=row["account_id"],
        prefix=row["prefix"],
        created_at=row["created_at"],
    )


def ledger_row(e: LedgerEntry) -> dict[str, Any]:
    """Amounts are kept as exact decimal text: no database number type is exact on both."""
    return {
        "key": e.key,
        "account_id": e.account_id,
        "at": e.at,
        "kind": e.kind,
        "amount": f"{e.amount:f}",
        "memo": e.memo,
    }


def ledger_entry(row: Row) -> LedgerEntry:
    return LedgerEntry(
        key=row["key"],
        account_id=row["account_id"],
        at=row["at"],
        kind=_ledger_kind(row["kind"]),
        amount=ledger_amount(row["amount"]),
        memo=row["memo"],
    )


def ledger_amount(text: str) -> Decimal:
    try:
        value = Decimal(text)
    except InvalidOperation:
        raise StoreDataError(f"ledger amount {text!r} in the store is not a number") from None
    return value


def _ledger_kind(kind: str) -> LedgerKind:
    if kind == "topup":
        return "topup"
    if kind == "charge":
        return "charge"
    if kind == "credit":
        return "credit"
    raise StoreDataError(f"unknown ledger kind {kind!r} in the store")


def exact_sum(amounts: list[Decimal]) -> Decimal:
    """A sum that never rounds: the context grows to the digits the amounts need."""
    with localcontext() as ctx:
        ctx.prec = 1000
        return sum(amounts, Decimal(0))


def first_per_key(entries: Sequence[LedgerEntry]) -> list[dict[str, Any]]:
    """The ledger rows of `entries`, one per key (the first, as a replay would keep), by key.

    Sorted so that two writers inserting overlapping keys lock them in the same order."""
    first: dict[str, LedgerEntry] = {}
    for e in entries:
        first.setdefault(e.key, e)
    return [ledger_row(first[k]) for k in sorted(first)]


def balances_after(balances: Mapping[str, str], inserted: Sequence[Row]) -> dict[str, str]:
    """The balance text of each account that the newly `inserted` ledger rows move.

    A balance is kept as the exact sum of its account's entries (`exact_sum`: exact addition
    does not depend on the order), as decimal text like the amounts, so it is the value — and
    the same digits — that summing the whole ledger would give."""
    moves: dict[str, list[Decimal]] = {}
    for r in inserted:
        moves.setdefault(r["account_id"], []).append(ledger_amount(r["amount"]))
    return {
        account: f"{exact_sum([ledger_amount(balances.get(account, '0')), *amounts]):f}"
        for account, amounts in moves.items()
    }


T = TypeVar("T")


def newest(found: list[T], last: int | None) -> list[T]:
    """The last `last` of rows sorted oldest first (all of them for None)."""
    if last is None:
        return found
    return found[-last:] if last > 0 else []
