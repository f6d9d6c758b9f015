"""Group commit: requests that wait for the decision lock are decided in turn, written together.

Why: a decision costs well under a millisecond, but its store commit costs a durable write (an
fsync on SQLite, a round trip and a WAL flush on PostgreSQL), and decisions are one at a time.
With many clients, each waiting for the lock while one commits, the commit is the ceiling.
Databases reach high commit rates by writing the transactions that queue up meanwhile as one;
this does the same for the plane's requests.

How: a request puts its ticket in the queue. If no leader is at work it leads: it takes the
decision lock and then every ticket queued by then, decides them one after another on the live
state (each on what the previous one left, kept in memory but not yet written: `Applied`),
writes all their commits as one store commit, then settles each ticket, which wakes its thread.
Meanwhile new tickets queue up; the leader hands the lead to the first of them when it is done,
and that thread takes them all as the next batch. Each request keeps its own semantics:

- its own errors: a request whose decision fails (no capacity, a bad volume) is settled with
  its error and leaves the live state as it was; the others go on;
- its own `StaleWrite`: if the joint write is stale, the live state is dropped (`write` does
  it) and each ticket of the batch is decided and written again on its own (`alone`, with the
  plain path's reload-and-retry), as it would have been without batching;
- its own effects after the commit: a ticket is settled only once the write has landed; its
  thread then carries out its commit's outbox, as an unbatched request does.

Crash safety is unchanged: nothing is answered before the one transaction that holds every
decision of the batch (with its outbox and events) has landed, and a crash before that loses
decisions nobody was told about. A write whose outcome is unknown (not a `StaleWrite`) fails
every request of the batch, as it would fail the one request it carried.

Two tickets of a batch that write the same key (an instance, an outbox entry, an event...)
are not joined: the batch so far is written first, so no commit carries one row twice.

Cost: per batch one store commit of the batch's rows; per ticket one decision. The lock is
held from the first decision to the end of the write, as for a single request.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass, fields
from typing import Any, Generic, TypeVar

from lowcostgpu.domain.errors import StaleWrite
from lowcostgpu.ports.records import WebhookChanges
from lowcostgpu.ports.store_records import Commit

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Applied(Generic[T]):
    """A request decided on the live state and kept there, not yet written: its answer, its
    commit, and what to do once the commit has landed."""

    value: T
    commit: Commit
    landed: Callable[[], None]


class _Ticket(Generic[T]):
    __slots__ = ("apply", "done", "error", "value", "woken")

    def __init__(self, apply: Callable[[], Applied[T]]) -> None:
        self.apply = apply
        self.done = False
        self.value: T | None = None
        self.error: BaseException | None = None
        self.woken = threading.Event()  # settled, or made the next leader

    def succeed(self, value: T) -> None:
        self.value, self.done = value, True
        self.woken.set()

    def fail(self, error: BaseException) -> None:
        self.error, self.done = error, True
        self.woken.set()


class CommitBatcher(Generic[T]):
    """`submit` decides a request, joined with the others waiting meanwhile into one write.

    One leader at a time takes the queue and `lock` (the decision lock, which unbatched
    decisions such as the loop's tick take too); the others wait on their own ticket, so that
    a request settled by a batch returns at once rather than queueing for the lock behind the
    next batch. A leader done with its batch hands the lead to the first ticket queued since.
    `write`: writes a commit (and drops the live state if that fails). `alone`: decides and
    writes one request the plain way, retrying after a `StaleWrite` (called with `lock` held).
    `submit` must not be called with `lock` held (it would wait for a leader that needs it).
    """

    def __init__(
        self,
        lock: AbstractContextManager[Any],
        write: Callable[[Commit], None],
        alone: Callable[[Callable[[], Applied[T]]], T],
    ) -> None:
        self._lock = lock
        self._write = write
        self._alone = alone
        self._queue: list[_Ticket[T]] = []
        self._queue_lock = threading.Lock()
        self._leading = False  # whether a leader is at work (or woken to be): under _queue_lock
        self.batches = 0  # joint writes so far, and the requests they carried (for the bench)
        self.carried = 0

    def submit(self, apply: Callable[[], Applied[T]]) -> T:
        """The request's answer once its decision is written, or its own error."""
        ticket = _Ticket(apply)
        with self._queue_lock:
            self._queue.append(ticket)
            lead = not self._leading
            self._leading = True
        if not lead:
            ticket.woken.wait()
        if not ticket.done:  # the lead is this thread's: its ticket is in the queue it takes
            self._lead()
        assert ticket.done
        if ticket.error is not None:
            raise ticket.error
        return ticket.value  # type: ignore[return-value]

    def _lead(self) -> None:
        """Take the lock, then the queue: what queued while the lock was busy (a tick) joins."""
        batch: list[_Ticket[T]] = []
        try:
            with self._lock:
                with self._queue_lock:
                    batch, self._queue = self._queue, []
                self._decide_all(batch)
        except BaseException as exc:  # the leader's thread is going down: nobody is left waiting
            for ticket in batch:
                if not ticket.done:
                    ticket.fail(exc)
            raise
        finally:
            with self._queue_lock:
                if self._queue:
                    self._queue[0].woken.set()  # not settled: it leads the next batch
                else:
                    self._leading = False

    def _decide_all(self, batch: list[_Ticket[T]]) -> None:
        group: list[tuple[_Ticket[T], Applied[T]]] = []
        keys: set[tuple[str, object]] = set()
        for ticket in batch:
            try:
                applied = ticket.apply()
            except Exception as exc:  # this request's own error; the live state is unchanged
                ticket.fail(exc)
                continue
            mine = keys_of(applied.commit)
            if not keys.isdisjoint(mine):  # the batch so far is written first
                written = self._flush(group)
                group, keys = [], set()
                if not written:  # the live state was dropped: this decision is void too
                    self._settle_alone(ticket)
                    continue
            group.append((ticket, applied))
            keys |= mine
        self._flush(group)

    def _flush(self, group: list[tuple[_Ticket[T], Applied[T]]]) -> bool:
        """Write the group's commits as one; settle each ticket. False if the write failed (the
        live state was dropped: what was applied after the group is void too)."""
        if not group:
            return True
        try:
            self._write(joined(a.commit for _, a in group))
        except StaleWrite:
            for ticket, _ in group:
                self._settle_alone(ticket)
            return False
        except Exception as exc:  # not known whether it landed: each request fails with it
            for ticket, _ in group:
                ticket.fail(exc)
            return False
        self.batches += 1
        self.carried += len(group)
        for ticket, applied in group:
            applied.landed()
            ticket.succeed(applied.value)
        return True

    def _settle_alone(self, ticket: _Ticket[T]) -> None:
        try:
            ticket.succeed(self._alone(ticket.apply))
        except Exception as exc:
            ticket.fail(exc)


def joined(commits: Iterable[Commit]) -> Commit:
    """One commit that writes what each of `commits` writes (their keys are disjoint)."""
    parts = list(commits)
    if len(parts) == 1:
        return parts[0]
    out: dict[str, Any] = {}
    for f in fields(Commit):
        values = [getattr(c, f.name) for c in parts]
        if f.name == "metered_through":
            out[f.name] = {k: v for m in values for k, v in m.items()}
        elif f.name == "webhooks":
            out[f.name] = WebhookChanges(
                endpoints=tuple(e for w in values for e in w.endpoints),
                deliveries=tuple(d for w in values for d in w.deliveries),
                attempts=tuple(a for w in values for a in w.attempts),
            )
        else:
            out[f.name] = [item for v in values for item in v]
    return Commit(**out)


def keys_of(commit: Commit) -> set[tuple[str, object]]:
    """What a commit writes by key: two commits that share one are not joined. Cost: O(rows)."""
    keys: set[tuple[str, object]] = set()
    keys.update(("instance", w.state.id) for w in commit.instances)
    keys.update(("cluster", w.state.id) for w in commit.clusters)
    keys.update(("node", w.state.id) for w in commit.nodes)
    keys.update(("outbox", e.key) for e in commit.outbox)
    keys.update(("event", e.key) for e in commit.events)
    keys.update(("ledger", e.key) for e in commit.ledger)
    keys.update(("volume", (v.account_id, v.name)) for v in commit.volumes)
    keys.update(("metered", k) for k in commit.metered_through)
    keys.update(("usage", (u.subject_id, u.kind, u.interval_start)) for u in commit.usage)
    keys.update(("account", a.id) for a in commit.accounts)
    keys.update(("api_key", k.key_hash) for k in commit.api_keys)
    webhooks = commit.webhooks
    keys.update(("endpoint", e.id) for e in webhooks.endpoints)
    keys.update(("delivery", d.id) for d in webhooks.deliveries)
    return keys
