"""The memory fake and the SQL stores agree: random commits leave identical observable state.

Each example applies the same random sequence of commits and mark_done calls to a `MemoryStore`
and to a SQL store, and after every step compares what each raised and everything a reader can
see. Small key spaces make collisions (stale versions, duplicate keys, upserts) frequent.
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from store_support import TABLES, Databases, launch, state

from lowcostgpu.adapters.store import MemoryStore, SqlStore
from lowcostgpu.core.metering import UsageRecord
from lowcostgpu.domain.capacity import CapacityClass
from lowcostgpu.domain.errors import LowcostgpuError, NotFound
from lowcostgpu.domain.events import EventType, Reason
from lowcostgpu.domain.status import InstanceStatus
from lowcostgpu.ports.store import EventRecord, Store
from lowcostgpu.ports.store_records import (
    Commit,
    InstanceWrite,
    LedgerEntry,
    OutboxEntry,
    OutboxFailure,
    VolumeRecord,
)

IDS = ["i-1", "i-2", "i-3"]
KEYS = ["k-1", "k-2", "k-3", "k-4"]
ACCOUNTS = ["acct-1", "acct-2"]
ids, keys, accounts = st.sampled_from(IDS), st.sampled_from(KEYS), st.sampled_from(ACCOUNTS)
times = st.integers(0, 10_000)


@st.composite
def instance_writes(draw: st.DrawFn) -> InstanceWrite:
    s = state(
        draw(ids),
        gpus=draw(st.integers(1, 8)),
        status=draw(st.sampled_from(InstanceStatus)),
        account_id=draw(accounts),
        runs=(),
    )
    version = draw(st.none() | st.integers(1, 4))
    volume = draw(st.none() | st.sampled_from(["a", "b"]))
    new = launch(s.id, created_at=draw(times), volume_name=volume)
    return InstanceWrite(s, version, new if version is None else None)


outbox_entries = st.builds(
    OutboxEntry,
    key=keys,
    kind=st.sampled_from(["start", "signal"]),
    payload=st.dictionaries(st.sampled_from("ab"), st.integers() | st.text(max_size=3)),
    created_at=times,
    attempts=st.integers(0, 3),
)
events = st.builds(
    EventRecord,
    key=keys,
    at=times,
    account_id=accounts,
    object_kind=st.just("instance"),
    object_id=ids,
    type=st.sampled_from(EventType),
    reason=st.sampled_from(Reason),
    message=st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=5),
    data=st.dictionaries(st.just("n"), st.integers(-5, 5)),
)
usage_records = st.builds(
    UsageRecord,
    subject_id=ids,
    account_id=accounts,
    kind=st.sampled_from(["gpu", "storage"]),
    resource=st.just("H100"),
    capacity_class=st.none() | st.sampled_from(CapacityClass),
    interval_start=st.sampled_from([0, 60, 120]),
    interval_end=st.just(180),
    seconds=st.integers(0, 60),
    quantity=st.integers(0, 8),
    quantity_s=st.integers(0, 480),
)
volumes = st.builds(
    VolumeRecord,
    account_id=accounts,
    name=st.sampled_from(["a", "b"]),
    size_gb=st.integers(1, 100),
    created_at=times,
    deleted_at=st.none() | times,
)
ledger_entries = st.builds(
    LedgerEntry,
    key=keys,
    account_id=accounts,
    at=times,
    kind=st.sampled_from(["topup", "charge"]),
    amount=st.builds(
        lambda n, places: Decimal(n).scaleb(-places),
        st.integers(-(10**6), 10**6),
        st.integers(0, 22),
    ),
)
commits = st.builds(
    Commit,
    instances=st.lists(instance_writes(), max_size=3),
    outbox=st.lists(outbox_entries, max_size=3),
    events=st.lists(events, max_size=3),
    usage=st.lists(usage_records, max_size=3),
    metered_through=st.dictionaries(st.tuples(ids, st.sampled_from(["gpu", "storage"])), times),
    volumes=st.lists(volumes, max_size=2),
    ledger=st.lists(ledger_entries, max_size=3),
)
failures = st.builds(
    OutboxFailure,
    key=keys,
    attempts=st.integers(0, 5),
    next_attempt_at=times,
    error=st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=3),
)
operations = st.lists(
    commits.map(lambda c: ("commit", c))
    | st.tuples(st.just("done"), st.lists(keys), times)
    | st.tuples(st.just("failed"), st.lists(failures, max_size=3)),
    min_size=1,
    max_size=8,
)


def apply(store: Store, op: tuple[Any, ...]) -> str | None:
    """What the operation raised (its type and message), None if nothing."""
    try:
        if op[0] == "commit":
            store.commit(op[1])
        elif op[0] == "failed":
            store.record_failures(op[1])
        else:
            store.mark_done(op[1], op[2])
    except LowcostgpuError as e:
        return f"{type(e).__name__}: {e}"
    return None


def observe(store: Store) -> dict[str, Any]:
    """Everything a reader sees (each query unfiltered: filters are checked by `observe_more`)."""
    return {
        "instances": store.instances(),
        "pending": store.pending_outbox(),
        "events": store.events(),
        "usage": store.usage(),
        "metered_through": store.metered_through(),
        "volumes": store.volumes(),
        "ledger": store.ledger(),
        "balances": {a: f"{b:f}" for a, b in store.balances().items()},  # digits too
    }


def observe_more(store: Store) -> dict[str, Any]:
    """The queries with their arguments: deleted instances, limits and filters."""
    one: dict[str, Any] = {}
    for i in IDS:
        try:
            one[i] = store.instance(i)
        except NotFound:
            one[i] = None
    return {
        "instance": one,
        "all_instances": store.instances(include_deleted=True),
        "pending_2": store.pending_outbox(limit=2),
        "due_2_by_60": store.pending_outbox(limit=2, due_at=60),
        "events_acct_2_after_1": store.events(after_seq=1, account_id="acct-2"),
        "events_2": store.events(limit=2),
        "usage_acct_1": store.usage(account_id="acct-1"),
        "volumes_acct_2": store.volumes("acct-2"),
        "ledger_acct_2": store.ledger("acct-2"),
        "balance_acct_1": store.balance("acct-1"),
        "naming_a_acct_1": store.instances_naming_volume("acct-1", "a"),
        "naming_b_acct_2_2": store.instances_naming_volume("acct-2", "b", limit=2),
    }


def empty(store: SqlStore) -> None:
    with store._engine.begin() as conn:  # faster than a fresh database for every example
        for table in sorted(TABLES):
            conn.execute(sa.text(f'DELETE FROM "{table}"'))


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_random_commits_leave_the_memory_fake_and_the_sql_store_identical(
    databases: Databases, tmp_path: Path, backend: str
) -> None:
    url = databases.sqlite(tmp_path) if backend == "sqlite" else databases.postgresql()
    sql = SqlStore.open(url)

    @settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(ops=operations)
    def same_state(ops: list[tuple[Any, ...]]) -> None:
        empty(sql)
        memory = MemoryStore()
        for op in ops:
            assert apply(sql, op) == apply(memory, op), op
            assert observe(sql) == observe(memory), op
        assert observe_more(sql) == observe_more(memory)

    try:
        same_state()
    finally:
        sql.close()
