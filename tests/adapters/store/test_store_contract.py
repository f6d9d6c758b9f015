"""The `Store` port's contract, run against every backend (memory, SQLite, PostgreSQL)."""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal

import pytest
from store_support import launch, rich_state, state

from lowcostgpu.adapters.store import StoreDataError
from lowcostgpu.core.lifecycle import Run
from lowcostgpu.core.metering import UsageRecord
from lowcostgpu.domain.capacity import CapacityClass
from lowcostgpu.domain.errors import InvalidRequest, NotFound, StaleWrite
from lowcostgpu.domain.events import EventType, Reason
from lowcostgpu.domain.status import InstanceStatus
from lowcostgpu.ports.store import EventRecord, Store
from lowcostgpu.ports.store_records import Commit, InstanceWrite, OutboxEntry, VolumeRecord


def create(store: Store, *ids: str) -> None:
    store.commit(Commit(instances=[InstanceWrite(state(i), None, launch(i)) for i in ids]))


def outbox(key: str, at: int = 100, **payload: object) -> OutboxEntry:
    return OutboxEntry(key=key, kind="signal", payload=payload, created_at=at)


def event(key: str, account: str = "acct-1", at: int = 100) -> EventRecord:
    return EventRecord(
        key=key,
        at=at,
        account_id=account,
        object_kind="instance",
        object_id="i-1",
        type=EventType.NORMAL,
        reason=Reason.STARTED,
        message=f"event {key}",
    )


def usage(subject: str, start: int, seconds: int = 60, account: str = "acct-1") -> UsageRecord:
    return UsageRecord(
        subject_id=subject,
        account_id=account,
        kind="gpu",
        resource="H100",
        capacity_class=CapacityClass.INTERRUPTIBLE,
        interval_start=start,
        interval_end=start + 60,
        seconds=seconds,
        quantity=2,
        quantity_s=2 * seconds,
    )


def test_a_rich_instance_and_its_launch_round_trip_exactly(store: Store) -> None:
    rich = rich_state()
    record = launch(
        rich.id,
        account_id=rich.account_id,
        argv=("python", "-m", "train", "--lr=3e-4", ""),
        env={"A": "1", "EMPTY": "", "UNICODE": "žluť"},
        template="pytorch",
        volume_name="ckpt",
        volume_size_gb=50,
        token_hash="sha256:abc",
        created_at=1_700_000_000,
    )
    store.commit(Commit(instances=[InstanceWrite(rich, None, record)]))
    got = store.instance(rich.id)
    assert (got.state, got.launch, got.version) == (rich, record, 1)
    assert isinstance(got.state.runs[0], Run) and isinstance(got.state.gpu_indices, tuple)
    assert isinstance(got.state.waiting_for, frozenset)
    assert store.instances() == [got]


def test_an_update_at_the_expected_version_bumps_the_version(store: Store) -> None:
    create(store, "i-1")
    running = state("i-1", status=InstanceStatus.STARTING, allocation_id="a-1")
    store.commit(Commit(instances=[InstanceWrite(running, 1)]))
    got = store.instance("i-1")
    assert (got.state, got.version, got.launch) == (running, 2, launch("i-1"))


@pytest.mark.parametrize(
    "write",
    [
        pytest.param(InstanceWrite(state("i-1"), None, launch("i-1")), id="create-existing"),
        pytest.param(InstanceWrite(state("i-1", gpus=2), 7), id="wrong-version"),
        pytest.param(InstanceWrite(state("i-9"), 1), id="update-missing"),
    ],
)
def test_a_stale_write_raises_and_writes_nothing_of_the_commit(
    store: Store, write: InstanceWrite
) -> None:
    create(store, "i-1")
    fresh = InstanceWrite(state("i-2"), None, launch("i-2"))
    commit = Commit(
        instances=[fresh, write],
        outbox=[outbox("o-1")],
        events=[event("e-1")],
        usage=[usage("i-1", 0)],
        metered_through={("i-1", "gpu"): 60},
        volumes=[VolumeRecord("acct-1", "v", 10, 5)],
    )
    with pytest.raises(StaleWrite):
        store.commit(commit)
    assert [s.state.id for s in store.instances()] == ["i-1"]
    assert store.instance("i-1").version == 1
    assert store.pending_outbox() == []
    assert store.events() == []
    assert store.usage() == [] and store.metered_through() == {} and store.volumes() == []
    store.commit(replace(commit, instances=[fresh]))  # the same commit, without the stale part
    assert len(store.events()) == 1 and len(store.pending_outbox()) == 1


def test_a_commit_with_an_unstorable_value_writes_nothing(store: Store) -> None:
    bad = replace(event("e-2"), data={"amount": Decimal("1.5")})
    commit = Commit(
        instances=[InstanceWrite(state("i-1"), None, launch("i-1"))],
        outbox=[outbox("o-1")],
        events=[event("e-1"), bad],
    )
    with pytest.raises(StoreDataError, match="Decimal"):
        store.commit(commit)
    assert store.instances() == [] and store.events() == [] and store.pending_outbox() == []


def test_two_writes_of_one_instance_in_a_commit_chain_their_versions(store: Store) -> None:
    s = state("i-1")
    store.commit(
        Commit(
            instances=[
                InstanceWrite(s, None, launch("i-1")),
                InstanceWrite(replace(s, gpus=2), 1),
                InstanceWrite(replace(s, gpus=3), 2),
            ]
        )
    )
    got = store.instance("i-1")
    assert (got.state.gpus, got.version) == (3, 3)


@pytest.mark.parametrize(
    ("write", "message"),
    [
        (InstanceWrite(state("i-1"), None), "needs its launch record"),
        (InstanceWrite(state("i-1"), None, launch("i-2")), "launch record is for i-2"),
    ],
)
def test_a_malformed_commit_is_refused_as_invalid(
    store: Store, write: InstanceWrite, message: str
) -> None:
    with pytest.raises(InvalidRequest, match=message):
        store.commit(Commit(instances=[write]))
    assert store.instances() == []


def test_deleted_instances_are_hidden_from_the_list_but_readable(store: Store) -> None:
    create(store, "i-b", "i-a", "i-c")
    store.commit(Commit(instances=[InstanceWrite(state("i-b", status=InstanceStatus.DELETED), 1)]))
    assert [s.state.id for s in store.instances()] == ["i-a", "i-c"]
    assert [s.state.id for s in store.instances(include_deleted=True)] == ["i-a", "i-b", "i-c"]
    assert store.instance("i-b").state.status is InstanceStatus.DELETED


def test_an_unknown_instance_is_not_found(store: Store) -> None:
    with pytest.raises(NotFound, match="no instance i-404"):
        store.instance("i-404")


def test_the_outbox_ignores_a_duplicate_key_and_keeps_insertion_order(store: Store) -> None:
    store.commit(Commit(outbox=[outbox("z", at=5, n=1), outbox("a", at=5), outbox("z", n=2)]))
    store.commit(Commit(outbox=[outbox("m", at=1, nested={"t": [1, 2]}), outbox("a", n=9)]))
    pending = store.pending_outbox()
    assert [(o.key, o.payload) for o in pending] == [
        ("z", {"n": 1}),
        ("a", {}),
        ("m", {"nested": {"t": [1, 2]}}),
    ]
    assert store.pending_outbox(limit=2) == pending[:2]


def test_mark_done_removes_effects_from_pending_and_keeps_them_done(store: Store) -> None:
    store.commit(Commit(outbox=[outbox("a"), outbox("b"), outbox("c")]))
    store.mark_done(["a", "c", "unknown"], at=200)
    assert [o.key for o in store.pending_outbox()] == ["b"]
    store.commit(Commit(outbox=[outbox("a")]))  # replayed after a crash: still done
    store.mark_done([], at=300)
    assert [o.key for o in store.pending_outbox()] == ["b"]


def test_events_get_increasing_seq_and_duplicates_are_ignored(store: Store) -> None:
    store.commit(Commit(events=[event("e1"), event("e2", "acct-2"), event("e1")]))
    store.commit(Commit(events=[event("e2"), event("e3"), event("e4", "acct-2")]))
    got = store.events()
    assert [(e.key, e.seq) for e in got] == [("e1", 1), ("e2", 2), ("e3", 3), ("e4", 4)]
    assert got[0] == replace(event("e1"), seq=1)
    assert got[1].account_id == "acct-2"  # the first write of a key wins


def test_a_commit_of_more_events_than_one_statement_takes_numbers_them_all_in_order(
    store: Store,
) -> None:
    """1,203 events (the SQL store inserts 500 per statement): the keys stored before and the
    repeated ones are skipped wherever they fall, the rest numbered in their order."""
    store.commit(Commit(events=[event("k-0007"), event("k-0750")]))
    keys = [f"k-{n:04d}" for n in range(1200)] + ["k-0003", "k-0999", "k-1200"]
    store.commit(Commit(events=[event(k, f"acct-{int(k[2:]) % 3}") for k in keys]))
    got = store.events(limit=2000)
    new = [k for k in [*keys[:1200], "k-1200"] if k not in ("k-0007", "k-0750")]
    numbered = enumerate(["k-0007", "k-0750", *new], 1)
    assert [(e.key, e.seq) for e in got] == [(k, n) for n, k in numbered]
    assert got[2].account_id == "acct-0" and got[3].account_id == "acct-1"


@pytest.mark.parametrize(
    ("after_seq", "account", "limit", "expected"),
    [
        (0, None, 1000, ["e1", "e2", "e3", "e4", "e5"]),
        (2, None, 1000, ["e3", "e4", "e5"]),
        (0, "acct-2", 1000, ["e2", "e4"]),
        (2, "acct-2", 1000, ["e4"]),
        (0, None, 2, ["e1", "e2"]),
        (5, None, 1000, []),
        (0, "nobody", 1000, []),
        (0, None, 0, []),
    ],
)
def test_events_filter_by_seq_and_account(
    store: Store, after_seq: int, account: str | None, limit: int, expected: list[str]
) -> None:
    accounts = ["acct-1", "acct-2", "acct-1", "acct-2", "acct-1"]
    for i, a in enumerate(accounts, 1):
        store.commit(Commit(events=[event(f"e{i}", a)]))
    got = store.events(after_seq=after_seq, account_id=account, limit=limit)
    assert [e.key for e in got] == expected


def test_usage_is_inserted_once_per_subject_kind_and_interval(store: Store) -> None:
    store.commit(Commit(usage=[usage("i-2", 60), usage("i-1", 60), usage("i-1", 0)]))
    store.commit(Commit(usage=[usage("i-1", 0, seconds=5), usage("i-3", 0, account="acct-2")]))
    got = store.usage()
    assert [(u.subject_id, u.interval_start) for u in got] == [
        ("i-1", 0),
        ("i-3", 0),
        ("i-1", 60),
        ("i-2", 60),
    ]
    assert got[0] == usage("i-1", 0)  # not the replayed one with 5 s
    assert store.usage(account_id="acct-2") == [usage("i-3", 0, account="acct-2")]


def test_storage_usage_without_a_class_round_trips(store: Store) -> None:
    record = replace(usage("vol-1", 0), kind="storage", resource="vol-1", capacity_class=None)
    store.commit(Commit(usage=[record]))
    assert store.usage() == [record]


def test_metered_through_is_upserted_per_key(store: Store) -> None:
    store.commit(Commit(metered_through={("i-1", "gpu"): 60, ("v-1", "storage"): 120}))
    store.commit(Commit(metered_through={("i-1", "gpu"): 180}))
    assert store.metered_through() == {("i-1", "gpu"): 180, ("v-1", "storage"): 120}


def test_volumes_are_upserted_by_account_and_name(store: Store) -> None:
    store.commit(
        Commit(
            volumes=[
                VolumeRecord("acct-2", "data", 10, 1),
                VolumeRecord("acct-1", "zeta", 5, 2),
                VolumeRecord("acct-1", "alpha", 5, 3),
            ]
        )
    )
    deleted = VolumeRecord("acct-1", "zeta", 5, 2, deleted_at=9)
    store.commit(Commit(volumes=[VolumeRecord("acct-1", "zeta", 6, 2), deleted]))
    assert store.volumes() == [
        VolumeRecord("acct-1", "alpha", 5, 3),
        deleted,
        VolumeRecord("acct-2", "data", 10, 1),
    ]
    assert store.volumes("acct-2") == [VolumeRecord("acct-2", "data", 10, 1)]
    assert store.volume("acct-1", "zeta") == deleted  # one by its key, a deleted one too
    assert store.volume("acct-2", "zeta") is None  # the name is the account's own
    assert store.volume("acct-1", "nope") is None


def test_an_empty_commit_changes_nothing(store: Store) -> None:
    store.commit(Commit())
    assert store.instances() == [] and store.events() == [] and store.pending_outbox() == []


def test_the_lead_is_kept_by_its_holder_and_refused_to_others(store: Store) -> None:
    assert store.try_lead("loop-a")
    assert store.try_lead("loop-a")  # keeping it
    assert not store.try_lead("loop-b")
    store.release_lead("loop-b")  # not the holder: no effect
    assert not store.try_lead("loop-b")
    store.release_lead("loop-a")
    assert store.try_lead("loop-b")


def test_a_second_store_on_the_same_database_sees_the_writes_and_versions(backend) -> None:  # type: ignore[no-untyped-def]
    if backend.url is None:
        pytest.skip("a memory store is its own database")
    first, second = backend.open(), backend.open()
    create(first, "i-1")
    assert second.instance("i-1").version == 1
    second.commit(Commit(instances=[InstanceWrite(state("i-1", gpus=2), 1)]))
    with pytest.raises(StaleWrite):
        first.commit(Commit(instances=[InstanceWrite(state("i-1", gpus=3), 1)]))
    assert first.instance("i-1").state.gpus == 2
    assert first.try_lead("a") and not second.try_lead("b")
    first.release_lead("a")
    assert second.try_lead("b")


def test_a_volume_keeps_its_earlier_sizes_and_last_checkpoint_step(store: Store) -> None:
    grown = VolumeRecord(
        "acct-1", "ckpts", 20, 100, history=((100, 160, 10), (160, 160, 15)), checkpoint_step=300
    )
    store.commit(Commit(volumes=[VolumeRecord("acct-1", "ckpts", 10, 100)]))
    store.commit(Commit(volumes=[grown]))
    assert store.volumes("acct-1") == [grown]
    assert grown.size_since == 160
