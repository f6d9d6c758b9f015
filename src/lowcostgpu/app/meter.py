"""Metering on the live state: open spans are kept, and usage is cut when an interval closes.

`core.metering.meter` turns spans into idempotent per-interval records; what this module adds is
*which* spans to give it, so that a pass costs what is still unbilled, not history: the live
instances whose usage is not yet metered through (`_open`: a run still going, or one that ended
after its watermark), the spans that finished instances and removed nodes handed over when they
left the live state (`_handed`), the live nodes and the volumes. A pass runs only when an interval
has closed since the last one (nothing else can produce a record), and the watermarks are kept
here, loaded once for the live subjects.

A takeover must also bill what the previous leader decided but did not meter yet (an instance
that finished a few seconds before the crash): every decision about an instance or a node writes
an event at its time, so the objects with events since the last metering pass (the store's
watermark, less two intervals) are the only ones that may still owe usage; `load` reads those.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from itertools import islice

from lowcostgpu.app.live import LiveState
from lowcostgpu.core.engine import EngineState
from lowcostgpu.core.lifecycle import InstanceState
from lowcostgpu.core.metering import (
    MeterKey,
    UsageRecord,
    UsageSpan,
    closed_until,
    instance_gpu_spans,
    meter,
    metered_through_after,
    node_gpu_span,
    volume_span,
)
from lowcostgpu.core.nodes import NodeState
from lowcostgpu.domain.capacity import Timestamp
from lowcostgpu.domain.errors import InvalidRequest, NotFound
from lowcostgpu.ports.store import EventRecord, Store
from lowcostgpu.ports.store_records import Commit, LedgerEntry, VolumeRecord

log = logging.getLogger(__name__)
EVENT_PAGE = 10_000
PASS_CHUNK = 250  # subjects per commit of a metering pass
PASS_PAUSE_S = 0.01
"""The pause between two commits of a pass. A pass of 10,000 subjects is ~0.5 s of CPU; run in
one go it held the interpreter lock against every request for that long, and launches through
HTTP waited 150–210 ms at p99 instead of ~45 ms (bench/plane.py, `http-launch-metering`). In
chunks of 250 with this pause, requests run between the chunks; the pass takes ~0.4 s more."""


def volume_key(account_id: str, name: str) -> str:
    """The metering subject of a volume."""
    return f"{account_id}/{name}"


@dataclass
class Meter:
    """What may still owe usage, and up to when each subject is billed."""

    interval_s: int
    through: dict[MeterKey, Timestamp] = field(default_factory=dict)
    volumes: dict[tuple[str, str], VolumeRecord] = field(default_factory=dict)
    _open: set[str] = field(default_factory=set)  # live instance ids with unbilled usage
    _handed: dict[str, list[UsageSpan]] = field(default_factory=dict)  # by subject id
    _last_closed: Timestamp | None = None  # the interval end the last pass metered up to

    @classmethod
    def load(cls, store: Store, live: LiveState, interval_s: int, now: Timestamp) -> Meter:
        """Watermarks of the live subjects and volumes, and the spans the previous leader left.

        Cost: O(live subjects + volumes + events since the last metering pass)."""
        m = cls(interval_s, volumes={(v.account_id, v.name): v for v in store.volumes()})
        state = live.state
        m._open = {i for i, inst in state.instances.items() if inst.runs or inst.held_runs}
        subjects = {*m._open, *state.nodes}  # an instance that never ran owes nothing yet
        subjects |= {volume_key(a, n) for a, n in m.volumes}
        m.through = store.metered_through(subjects)
        m._adopt_stragglers(store, state, now)
        return m

    def _adopt_stragglers(self, store: Store, state: EngineState, now: Timestamp) -> None:
        """Instances and nodes that left the live state with usage still to meter."""
        watermark = store.metering_watermark()
        since = 0 if watermark is None else max(0, watermark - 2 * self.interval_s)
        ids: dict[str, set[str]] = {"instance": set(), "node": set()}
        after = 0
        while True:
            page = store.events(after_seq=after, since=since, until=now + 1, limit=EVENT_PAGE)
            for e in page:
                if e.object_kind in ids:
                    ids[e.object_kind].add(e.object_id)
            if len(page) < EVENT_PAGE:
                break
            after = page[-1].seq or after
        spans = [s for i in ids["instance"] - set(state.instances) for s in _spans_of(store, i)]
        spans += _removed_node_spans(store, ids["node"] - set(state.nodes))
        self.through.update(store.metered_through({s.subject_id for s in spans}))
        for span in spans:
            self._hand_over(span)

    def _hand_over(self, span: UsageSpan) -> None:
        """Idempotent: an instance can leave twice before a pass (it finished, then a delete
        adopted it for one decision and it left again), and its runs must be billed once."""
        if _owes(span, self.through.get(span.meter_key)):
            handed = self._handed.setdefault(span.subject_id, [])
            if span not in handed:
                handed.append(span)

    def adopted(self, store: Store, instance_id: str) -> None:
        """An instance came back into the live state (a resume): its watermark is read again
        (it was let go once billed in full). Spans it handed over and that are not billed yet
        stay here; a pass takes its runs from the instance while it is live (`_spans`)."""
        if instance_id not in self._handed:
            self.through.update(store.metered_through({instance_id}))

    # --- between passes ---------------------------------------------------------------------

    def touched(self, state: EngineState, instance_ids: Iterable[str]) -> None:
        """Instances a commit wrote may have started or ended a run: look at them next pass."""
        for instance_id in instance_ids:
            inst = state.instances.get(instance_id)
            if inst is not None and (inst.runs or inst.held_runs):
                self._open.add(instance_id)

    def left(self, gone: Iterable[InstanceState]) -> None:
        """Instances that left the live state hand over the spans not yet metered."""
        for inst in gone:
            self._open.discard(inst.id)
            for span in instance_gpu_spans(inst):
                self._hand_over(span)

    def nodes_left(self, nodes: Iterable[NodeState]) -> None:
        for node in nodes:
            span = node_gpu_span(node)
            if span is not None:
                self._hand_over(span)

    def volumes_written(self, volumes: Iterable[VolumeRecord]) -> None:
        for v in volumes:
            self.volumes[(v.account_id, v.name)] = v

    # --- a pass -----------------------------------------------------------------------------

    def due(self, now: Timestamp) -> bool:
        """Whether an interval has closed since the last pass: only then can a record come."""
        return self._last_closed is None or closed_until(now, self.interval_s) > self._last_closed

    def cut(self, state: EngineState) -> Cut:
        """What a pass meters, taken under the decision lock: copies of the sets decisions
        keep, and the state (immutable) they refer to. The spans are built from it outside the
        lock, chunk by chunk (`Cut.subjects`): at 10,000 running instances building them took
        29 ms under it, which every launch waited for. Cost here: copying O(open subjects) ids
        and watermarks."""
        handed = [s for i, spans in self._handed.items() if i not in state.instances for s in spans]
        return Cut(
            state, sorted(self._open), handed, list(self.volumes.values()), dict(self.through)
        )

    def passed(
        self, state: EngineState, moved: Mapping[MeterKey, Timestamp], now: Timestamp
    ) -> None:
        """The pass's commits landed: keep their watermarks, let go of what is billed in full.
        A running instance (the common case) is kept without building its spans."""
        self.through.update(moved)
        self._last_closed = closed_until(now, self.interval_s)
        for instance_id in list(self._open):
            inst = state.instances.get(instance_id)
            if inst is None or (not _running(inst) and self._billed(instance_gpu_spans(inst))):
                self._open.discard(instance_id)
        for subject_id, spans in list(self._handed.items()):
            if subject_id in state.instances:
                self._open.add(subject_id)  # it came back: billed as a live instance
                del self._handed[subject_id]
            elif self._billed(spans):
                del self._handed[subject_id]
                self.through.pop(spans[0].meter_key, None)

    def _billed(self, spans: list[UsageSpan]) -> bool:
        """Every span has ended and is metered through its end."""
        if not spans:
            return True
        since = self.through.get(spans[0].meter_key)
        return not any(s.end is None or _owes(s, since) for s in spans)


@dataclass(frozen=True)
class Cut:
    """A pass's subjects as they were at its start (`Meter.cut`)."""

    state: EngineState
    open_ids: list[str]  # sorted
    handed: list[UsageSpan]  # of subjects no longer live
    volumes: list[VolumeRecord]
    through: dict[MeterKey, Timestamp]  # a copy

    def subjects(self) -> Iterator[list[UsageSpan]]:
        """The spans that may owe usage, a subject at a time (each subject once). Lazy, so
        that a pass builds them chunk by chunk outside the decision lock; O(open subjects)."""
        for instance_id in self.open_ids:
            inst = self.state.instances.get(instance_id)
            if inst is not None and (spans := self._unbilled(instance_gpu_spans(inst))):
                yield spans
        by_subject: dict[MeterKey, list[UsageSpan]] = {}
        for span in self.handed:
            by_subject.setdefault(span.meter_key, []).append(span)
        yield from by_subject.values()
        for n in self.state.nodes.values():
            if (node_span := node_gpu_span(n)) is not None:
                yield [node_span]
        for v in self.volumes:
            yield volume_spans(v)

    def _unbilled(self, spans: list[UsageSpan]) -> list[UsageSpan]:
        """Runs that end after their subject's watermark (earlier ones are billed in full)."""
        if not spans:
            return spans
        since = self.through.get(spans[0].meter_key)
        return [s for s in spans if _owes(s, since)]


def _running(inst: InstanceState) -> bool:
    """A run (or a hold) still open: not billed in full, whatever the watermark."""
    return any(r.billed_until is None for r in inst.runs) or any(
        r.billed_until is None for r in inst.held_runs
    )


def volume_spans(v: VolumeRecord) -> list[UsageSpan]:
    """A volume's storage at the size of each moment: its earlier sizes (`history`: before a
    resize, or a deleted volume of the same name) and its size since, until its deletion."""
    key = volume_key(v.account_id, v.name)
    spans = [volume_span(key, v.account_id, size, a, b) for a, b, size in v.history if b > a]
    end = v.deleted_at if v.deleted_at is None else max(v.deleted_at, v.size_since)
    return [*spans, volume_span(key, v.account_id, v.size_gb, v.size_since, end)]


def _owes(span: UsageSpan, since: Timestamp | None) -> bool:
    """Whether some of the span is not billed yet: it is open, or it ends after the watermark
    (a span of no length owes nothing)."""
    if span.end is None:
        return True
    return span.end > span.start and (since is None or span.end > since)


def pass_commits(
    cut: Cut,
    now: Timestamp,
    interval_s: int,
    charge: Callable[[list[UsageRecord]], tuple[list[LedgerEntry], list[EventRecord]]],
    chunk: int | None = None,
) -> Iterator[Commit]:
    """The commits of one pass, `chunk` (default `PASS_CHUNK`) subjects each: their records,
    watermarks, charges and BalanceLow events together, so a crash between two commits leaves
    every subject either metered through the pass or not at all (the next pass takes it up).
    Computed a chunk at a time and written outside the decision lock: a pass of 10,000 running
    instances does not stop launches."""
    subjects, size = cut.subjects(), chunk or PASS_CHUNK
    while part := list(islice(subjects, size)):
        usage = _metered(part, cut.through, now, interval_s)
        moved = {
            k: at for k, at in metered_through_after({}, usage).items() if cut.through.get(k) != at
        }
        if moved:
            ledger, events = charge(usage)
            yield Commit(usage=usage, metered_through=moved, ledger=ledger, events=events)


def _metered(
    part: list[list[UsageSpan]],
    through: Mapping[MeterKey, Timestamp],
    now: Timestamp,
    interval_s: int,
) -> list[UsageRecord]:
    """The records of a chunk's subjects (each subject's spans one list), in `meter`'s order.
    A subject whose spans `meter` refuses (they overlap: a bug upstream) is left out and logged
    for the operator: its watermark stays, so it is billed once fixed, and the other subjects of
    the chunk are billed now. One subject must never stop the billing of the others."""
    try:
        return meter([s for spans in part for s in spans], through, now, interval_s)
    except InvalidRequest:
        pass  # find which subject: meter them one at a time
    usage: list[UsageRecord] = []
    for spans in part:
        try:
            usage += meter(spans, through, now, interval_s)
        except InvalidRequest as exc:
            subject = spans[0].subject_id
            log.error("metering left out %s until its spans are fixed: %s", subject, exc)
    return sorted(usage, key=lambda r: (r.subject_id, r.kind, r.interval_start))


def _spans_of(store: Store, instance_id: str) -> list[UsageSpan]:
    try:
        return instance_gpu_spans(store.instance(instance_id).state)
    except NotFound:
        return []


def _removed_node_spans(store: Store, node_ids: Iterable[str]) -> list[UsageSpan]:
    """Removed nodes, read by their cluster (a node id is `<cluster>-n<k>`)."""
    wanted = set(node_ids)
    clusters = {n.rsplit("-n", 1)[0] for n in wanted}
    spans = []
    for cluster_id in sorted(clusters):
        for stored in store.nodes(cluster_id=cluster_id, include_removed=True):
            if stored.state.id in wanted and (s := node_gpu_span(stored.state)) is not None:
                spans.append(s)
    return spans
