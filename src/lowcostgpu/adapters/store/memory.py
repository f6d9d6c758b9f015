"""`MemoryStore`: the `Store` port in memory, with exactly the semantics of `SqlStore`.

For tests of the loop and for the simulator. It keeps the same rows the SQL store keeps (built
and read back by `rows`, so every state goes through the JSON codec and an unstorable value fails
here as it would there), checks versions the same way, writes a commit all or nothing, and orders
every query the same way. The suite in `tests/adapters/store` runs against both and a property
test compares them after random sequences of commits.

The lead lock is per object: a memory store lives in one process, so one object is one store.

The tables and the reads are in its base class, `MemoryReads` (`memory_reads`); here are the
commit path and the lead lock.
"""

from __future__ import annotations

from collections.abc import Sequence

from lowcostgpu.adapters.store import cluster_rows, rows
from lowcostgpu.adapters.store.memory_reads import MemoryReads, Row
from lowcostgpu.domain.capacity import Timestamp
from lowcostgpu.domain.errors import StaleWrite
from lowcostgpu.ports.records import EventRecord
from lowcostgpu.ports.store_records import Commit, OutboxFailure


class MemoryStore(MemoryReads):
    def commit(self, commit: Commit) -> None:
        rows.check_commit(commit)
        with self._mutex:
            instances = self._versioned(commit)  # raises before anything is written
            outbox = [rows.outbox_row(e) for e in commit.outbox]
            usage = [rows.usage_row(u) for u in commit.usage]
            volumes = [rows.volume_row(v) for v in commit.volumes]
            accounts = [rows.account_row(a) for a in commit.accounts]
            api_keys = [rows.api_key_row(k) for k in commit.api_keys]
            ledger = [r for r in rows.first_per_key(commit.ledger) if r["key"] not in self._ledger]
            balances = rows.balances_after(self._balances, ledger)  # by exactly what is new
            events = self._new_events(commit.events)
            clusters = cluster_rows.versioned_after(
                self._clusters, commit.clusters, "cluster", cluster_rows.cluster_row
            )
            nodes = cluster_rows.versioned_after(
                self._nodes, commit.nodes, "node", cluster_rows.node_row
            )
            new = [(rows.event_record(e), e["seq"]) for e in events]
            deliveries = self._webhooks.deliveries_after(commit.webhooks, new)
            # Everything is encoded and checked: from here on nothing can fail half-way.
            self._instances.update(instances)
            self._clusters.update(clusters)
            self._nodes.update(nodes)
            for o in outbox:
                if o["key"] not in self._outbox:
                    self._outbox[o["key"]] = self._pending[o["key"]] = {**o, "done_at": None}
            self._events.extend(events)
            self._event_keys.update(e["key"] for e in events)
            for u in usage:
                self._usage.setdefault((u["subject_id"], u["kind"], u["interval_start"]), u)
            self._metered.update(commit.metered_through)
            for v in volumes:
                self._volumes[(v["account_id"], v["name"])] = v
            for a in accounts:
                self._accounts.setdefault(a["id"], a)
            for k in api_keys:
                self._api_keys.setdefault(k["key_hash"], k)
            self._ledger.update((e["key"], e) for e in ledger)
            self._balances.update(balances)
            self._webhooks.write(commit.webhooks, deliveries)

    def _versioned(self, commit: Commit) -> dict[str, Row]:
        """The instance rows after `commit`, or `StaleWrite` with nothing changed."""
        after: dict[str, Row] = {}
        for w in commit.instances:
            current = after.get(w.state.id) or self._instances.get(w.state.id)
            if w.expected_version is None:
                if current is not None:
                    raise StaleWrite(
                        f"instance {w.state.id} already exists",
                        hint="someone created it first; re-read it and decide again",
                    )
                after[w.state.id] = rows.new_instance_row(w)
                continue
            if current is None or current["version"] != w.expected_version:
                raise StaleWrite(
                    f"instance {w.state.id} is no longer at version {w.expected_version}",
                    hint="someone else wrote it first; re-read it and decide again",
                )
            version = w.expected_version + 1
            after[w.state.id] = {**current, **rows.instance_row(w.state), "version": version}
        return after

    def _new_events(self, events: Sequence[EventRecord]) -> list[Row]:
        """The rows of the events not stored yet, numbered after the last one."""
        new: list[Row] = []
        seen = set(self._event_keys)
        seq = self._events[-1]["seq"] if self._events else 0
        for e in events:
            if e.key not in seen:
                seen.add(e.key)
                seq += 1
                new.append(rows.event_row(e, seq))
        return new

    def mark_done(self, keys: Sequence[str], at: Timestamp) -> None:
        with self._mutex:
            for key in keys:
                row = self._pending.pop(key, None)
                if row is not None:
                    row["done_at"] = at

    def record_failures(self, failures: Sequence[OutboxFailure]) -> None:
        with self._mutex:
            for f in failures:
                row = self._pending.get(f.key)
                if row is not None and row["attempts"] < f.attempts:
                    row.update(attempts=f.attempts, next_attempt_at=f.next_attempt_at)
                    row["last_error"] = f.error

    def try_lead(self, owner: str) -> bool:
        with self._mutex:
            if self._leader in (None, owner):
                self._leader = owner
                return True
            return False

    def release_lead(self, owner: str) -> None:
        with self._mutex:
            if self._leader == owner:
                self._leader = None

    def close(self) -> None:
        with self._mutex:
            self._leader = None
