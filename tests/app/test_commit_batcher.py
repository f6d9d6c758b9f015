"""Group commit (`app.commit_batcher`): launches that wait for the decision lock are decided in
turn and written in one store commit, each with its own answer, errors and effects.

Each test holds the plane's decision lock while its launches queue up behind it (waiting, with a
deadline, until all are queued), then lets go: the first thread to get the lock decides them all.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from plane_world import World

from lowcostgpu.app.commit_batcher import Applied, CommitBatcher, joined, keys_of
from lowcostgpu.app.launch import LaunchRequest
from lowcostgpu.domain.errors import InsufficientCapacity, StaleWrite
from lowcostgpu.domain.status import InstanceStatus
from lowcostgpu.ports.store import EventRecord
from lowcostgpu.ports.store_records import Commit, StoredInstance
from waiting import wait_until

_I = InstanceStatus


def launch_of(kind: str, gpus: int, account: str = "acme") -> LaunchRequest:
    return LaunchRequest(account, "a100-sxm4", kind, gpus, command=("train",))


class RecordingStore:
    """The world's store, recording each commit; `fail` raises for the next joint commits."""

    def __init__(self, world: World, log: list[str]) -> None:
        self.inner = world.store
        self.log = log
        self.commits: list[Commit] = []
        self.fail: list[BaseException] = []

    def commit(self, commit: Commit) -> None:
        if self.fail and len(commit.instances) > 1:
            raise self.fail.pop(0)
        self.inner.commit(commit)
        self.commits.append(commit)
        self.log.append(f"commit {len(commit.instances)}")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def recording(world: World) -> tuple[RecordingStore, list[str]]:
    log: list[str] = []
    store = RecordingStore(world, log)
    world.plane.store = store  # type: ignore[assignment]
    start = world.runtime.start

    def started(spec: Any) -> None:
        log.append(f"start {spec.instance_id}")
        start(spec)

    world.runtime.start = started  # type: ignore[method-assign]
    return store, log


def launched_together(w: World, requests: Sequence[LaunchRequest]) -> list[object]:
    """Each request's answer (a StoredInstance) or error, all queued behind the held lock."""
    results: list[object] = [None] * len(requests)

    def one(i: int) -> None:
        try:
            results[i] = w.plane.launch(requests[i])
        except Exception as exc:
            results[i] = exc

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(requests))]
    batcher = w.plane.decider.batcher
    with w.plane.decider.lock:
        for i, t in enumerate(threads):
            t.start()  # one by one: the queue keeps their order
            wait_until(lambda n=i + 1: len(batcher._queue) == n, what="launches queued")
    for t in threads:
        t.join(timeout=60)
    return results


def test_launches_waiting_for_the_lock_are_written_in_one_commit_each_with_its_answer() -> None:
    w = World(gpus=8)
    store, _ = recording(w)
    requests = [launch_of("interruptible", 2, f"acct-{i}") for i in range(6)]
    results = launched_together(w, requests)
    assert all(isinstance(r, StoredInstance) for r in results), results
    answers = [r for r in results if isinstance(r, StoredInstance)]
    assert [a.launch.account_id for a in answers] == [r.account_id for r in requests]
    assert len(store.commits) == 1 and len(store.commits[0].instances) == 6
    for a in answers:  # the answer is what the store holds
        assert w.store.instance(a.state.id) == a
    statuses = sorted(a.state.status.value for a in answers)
    assert statuses == ["queued", "queued", "starting", "starting", "starting", "starting"]


@pytest.mark.parametrize(
    ("kinds", "refused"),
    [
        (["interruptible", "on-demand", "interruptible"], [1]),
        (["on-demand", "on-demand", "on-demand"], [0, 1, 2]),
        (["on-demand", "interruptible", "interruptible", "on-demand"], [0, 3]),
    ],
)
def test_a_refused_launch_in_a_batch_fails_alone(kinds: list[str], refused: list[int]) -> None:
    w = World(gpus=8)
    w.plane.launch(launch_of("on-demand", 8))  # the fleet is held: nothing to reclaim
    store, _ = recording(w)
    results = launched_together(w, [launch_of(k, 1) for k in kinds])
    for i, r in enumerate(results):
        if i in refused:
            assert isinstance(r, InsufficientCapacity), (i, r)
        else:
            assert isinstance(r, StoredInstance), (i, r)
            assert w.store.instance(r.state.id).state.status is _I.QUEUED
    written = [x.state.id for c in store.commits for x in c.instances]
    assert len(written) == len(kinds) - len(refused)
    assert len(store.commits) == (0 if len(refused) == len(kinds) else 1)


def test_a_stale_joint_write_decides_each_launch_again_alone() -> None:
    w = World(gpus=8)
    store, _ = recording(w)
    store.fail = [StaleWrite("another writer")]
    results = launched_together(w, [launch_of("interruptible", 1) for _ in range(3)])
    assert all(isinstance(r, StoredInstance) for r in results), results
    assert store.fail == []  # the joint write was tried
    assert [len(c.instances) for c in store.commits] == [1, 1, 1]  # each alone, after reload
    assert len(w.store.instances()) == 3


def test_a_joint_write_that_fails_fails_each_launch_and_starts_nothing() -> None:
    w = World(gpus=8)
    store, log = recording(w)
    store.fail = [OSError("disk gone")]
    results = launched_together(w, [launch_of("interruptible", 1) for _ in range(3)])
    assert all(isinstance(r, OSError) for r in results), results
    assert w.store.instances() == [] and w.runtime.running() == [] and log == []
    after = w.plane.launch(launch_of("interruptible", 8))  # the live state was loaded again
    assert after.state.status is _I.STARTING


def test_each_launch_of_a_batch_is_started_after_the_joint_commit() -> None:
    w = World(gpus=8)
    _, log = recording(w)
    results = launched_together(w, [launch_of("interruptible", 2) for _ in range(3)])
    ids = sorted(r.state.id for r in results if isinstance(r, StoredInstance))
    assert log[0] == "commit 3"
    assert sorted(log[1:]) == [f"start {i}" for i in ids]
    assert w.store.pending_outbox() == []


# The batcher alone, on made-up commits ---------------------------------------------------------


@pytest.mark.parametrize(
    ("event_keys", "writes"),
    [
        (["e1", "e2", "e3"], [["e1", "e2", "e3"]]),
        (["e1", "e1", "e2"], [["e1"], ["e1", "e2"]]),  # one key twice: written apart, in order
        (["e1", "e2", "e1", "e1"], [["e1", "e2"], ["e1"], ["e1"]]),
    ],
)
def test_requests_that_write_the_same_key_are_not_joined(
    event_keys: list[str], writes: list[list[str]]
) -> None:
    lock = threading.RLock()
    written: list[list[str]] = []
    landed: list[int] = []

    def write(commit: Commit) -> None:
        written.append([e.key for e in commit.events])

    def alone(apply: Callable[[], Applied[int]]) -> int:
        raise AssertionError("no write is stale here")

    batcher = CommitBatcher[int](lock, write, alone)

    def apply_of(i: int) -> Callable[[], Applied[int]]:
        commit = Commit(events=[EventRecord(event_keys[i], 0, "a", "x", "o", "t", "r", "m")])
        return lambda: Applied(i, commit, lambda: landed.append(i))

    results: list[int | None] = [None] * len(event_keys)

    def one(i: int) -> None:
        results[i] = batcher.submit(apply_of(i))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(event_keys))]
    with lock:
        for i, t in enumerate(threads):
            t.start()  # in order: the queue keeps the order of arrival
            wait_until(lambda n=i + 1: len(batcher._queue) == n, what="queued")
    for t in threads:
        t.join(timeout=60)
    assert results == list(range(len(event_keys)))
    assert written == writes
    assert landed == list(range(len(event_keys)))


def test_a_joined_commit_writes_every_part() -> None:
    parts = [
        Commit(
            events=[EventRecord(f"e{i}", 0, "a", "x", "o", "t", "r", "m")],
            metered_through={("s", f"k{i}"): i},  # type: ignore[dict-item]
        )
        for i in range(3)
    ]
    one = joined(parts)
    assert [e.key for e in one.events] == ["e0", "e1", "e2"]
    assert len(one.metered_through) == 3
    assert keys_of(one) == set().union(*(keys_of(p) for p in parts))
    assert joined(parts[:1]) is parts[0]


class CountingLock:
    """An RLock that counts how often threads other than the test's take it."""

    def __init__(self) -> None:
        self.inner = threading.RLock()
        self.owner = threading.get_ident()
        self.taken_by_others = 0

    def __enter__(self) -> None:
        self.inner.acquire()
        if threading.get_ident() != self.owner:
            self.taken_by_others += 1

    def __exit__(self, *_: object) -> None:
        self.inner.release()


def test_a_request_settled_by_a_batch_returns_without_taking_the_lock_again() -> None:
    lock = CountingLock()
    writes: list[int] = []

    def alone(apply: Callable[[], Applied[int]]) -> int:
        raise AssertionError("no write is stale here")

    batcher = CommitBatcher[int](lock, lambda c: writes.append(len(c.events)), alone)

    def apply_of(i: int) -> Callable[[], Applied[int]]:
        commit = Commit(events=[EventRecord(f"e{i}", 0, "a", "x", "o", "t", "r", "m")])
        return lambda: Applied(i, commit, lambda: None)

    results: list[int | None] = [None] * 5
    threads = [
        threading.Thread(target=lambda i=i: results.__setitem__(i, batcher.submit(apply_of(i))))
        for i in range(5)
    ]
    with lock:  # a tick, say
        for i, t in enumerate(threads):
            t.start()
            wait_until(lambda n=i + 1: len(batcher._queue) == n, what="queued")
    for t in threads:
        t.join(timeout=60)
    assert results == [0, 1, 2, 3, 4]
    assert writes == [5]
    assert lock.taken_by_others == 1  # the leader, once: the others were woken, not queued
