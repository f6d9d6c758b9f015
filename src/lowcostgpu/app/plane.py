"""The control plane: every request and every tick is one decision, written before it is acted on.

A decision reads `now` once, loads the instances from the store, rebuilds the engine state from
them (`core.engine.state_from_instances`), lets the pure engine decide, and commits the changed
instances with their expected versions together with the effects (outbox) and events in one
transaction (the commit is built by `app.decisions`). Only then are the effects carried out
(`app.effects`), and marked done. A conflict (`StaleWrite`) means someone else wrote first: the
decision is made again on fresh state.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field, replace
from decimal import Decimal
from itertools import pairwise
from types import MappingProxyType
from typing import Any

from lowcostgpu.app import billing
from lowcostgpu.app.clusters import (
    ClusterRecords,
    ClusterRequests,
    absorb_node_reports,
    node_allocations,
    node_spans,
)
from lowcostgpu.app.decisions import Decision, commit_of, stamped, volume_created
from lowcostgpu.app.effects import Outcome
from lowcostgpu.app.launch import LaunchRequest, build_launch
from lowcostgpu.core import engine
from lowcostgpu.core.checkpoint_ages import CheckpointAges
from lowcostgpu.core.drain import interruption_notice
from lowcostgpu.core.effects import Effect
from lowcostgpu.core.engine import EngineState, EngineStep
from lowcostgpu.core.holds import OnDemandHold, with_refusal
from lowcostgpu.core.instance_state import DRAINING
from lowcostgpu.core.lifecycle import (
    CheckpointReported,
    CompletionReported,
    DeleteRequested,
    LifecycleEvent,
    ResumeRequested,
    StartFailed,
    StopRequested,
    WorkloadExited,
    WorkloadStarted,
)
from lowcostgpu.core.metering import (
    instance_gpu_spans,
    meter,
    metered_through_after,
    volume_span,
)
from lowcostgpu.core.scheduler import SchedulerConfig
from lowcostgpu.domain.capacity import CapacityClass, Host, PoolKey, Timestamp
from lowcostgpu.domain.catalog import Catalog
from lowcostgpu.domain.errors import Conflict, InsufficientCapacity, StaleWrite, Unavailable
from lowcostgpu.domain.events import Reason
from lowcostgpu.domain.status import InstanceStatus
from lowcostgpu.ports.clock import Clock, IdSource
from lowcostgpu.ports.runtime import Runtime, WorkloadReport
from lowcostgpu.ports.store import Commit, OutboxEntry, Store, StoredInstance, VolumeRecord

MAX_ATTEMPTS = 5  # decisions retried after a StaleWrite before giving up
STATS_WINDOW_S = 7 * 24 * 3600


@dataclass(frozen=True, slots=True)
class PlaneConfig:
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    metering_interval_s: int = 60
    poll_interval_s: float = 1.0  # how often the loop looks at the runtime at the latest
    low_balance_usd: Decimal = billing.DEFAULT_LOW_BALANCE_USD  # `BalanceLow` below this


class ControlPlane(ClusterRequests):
    """Decisions on a store; effects are carried out by whoever holds the lead.

    Cluster requests (`create_cluster`, `update_cluster_target`, `get_cluster`, `list_clusters`,
    `delete_cluster`) come from `app.clusters.ClusterRequests`."""

    def __init__(
        self,
        *,
        store: Store,
        runtime: Runtime,
        clock: Clock,
        ids: IdSource,
        hosts: Sequence[Host],
        catalog: Catalog,
        config: PlaneConfig,
        carry_out: Callable[[Sequence[OutboxEntry]], Outcome],
    ) -> None:
        self.store = store
        self.runtime = runtime
        self.clock = clock
        self.ids = ids
        self.hosts = list(hosts)
        self.catalog = catalog
        self.config = config
        self._carry_out = carry_out
        self._lock = threading.RLock()
        self.wake = threading.Event()  # set when a decision may have work for the loop
        # A standby server (another holds the store's lead) decides nothing: two deciders on one
        # store could both place work on the same free GPUs, since versions guard instances,
        # not the fleet. The loop clears this once it holds the lead.
        self.standby = False
        # On-demand holds (`core.holds`) are soft and not stored: kept here between decisions,
        # forgotten by a restart (the worst case is the race they avoid).
        self._holds: Mapping[PoolKey, OnDemandHold] = {}
        self.checkpoint_ages = CheckpointAges()  # what the fairness policy charges non-reporters

    # Requests ----------------------------------------------------------------------------------

    def launch(self, request: LaunchRequest) -> StoredInstance:
        instance_id = self.ids.new_id("i")
        spec, record = build_launch(request, instance_id, self.catalog, self.hosts)

        known_volumes = {(v.account_id, v.name) for v in self.store.volumes()}

        def decide(state: EngineState, now: Timestamp) -> Decision:
            step = engine.launch(state, spec, now, self.config.scheduler)
            volumes, events = [], []
            if record.volume_name and (record.account_id, record.volume_name) not in known_volumes:
                size_gb = record.volume_size_gb or 0
                volumes.append(VolumeRecord(record.account_id, record.volume_name, size_gb, now))
                events.append(volume_created(record.account_id, record.volume_name, size_gb, now))
            extra = Commit(volumes=volumes, events=events)
            return Decision(step, {instance_id: stamped(record, now)}, extra)

        try:
            self._decide(decide)
        except InsufficientCapacity:
            self._hold_for(spec.pool, spec.gpus)
            raise
        return self.store.instance(instance_id)

    def _hold_for(self, pool: PoolKey, gpus: int) -> None:
        """A refused on-demand customer: GPUs that free in the pool wait for their retry."""
        with self._lock:
            hold_s = self.config.scheduler.on_demand_hold_s
            self._holds = with_refusal(self._holds, pool, gpus, self.clock.now(), hold_s)
        self.wake.set()  # the loop must tick when the hold ends

    def stop(self, instance_id: str) -> StoredInstance:
        return self._user(instance_id, StopRequested())

    def resume(self, instance_id: str) -> StoredInstance:
        return self._user(instance_id, ResumeRequested())

    def delete(self, instance_id: str) -> StoredInstance:
        return self._user(instance_id, DeleteRequested())

    def report_checkpoint(self, instance_id: str, step: int) -> StoredInstance:
        before = self.store.instance(instance_id).state  # NotFound before anything else
        stored = self._reported(instance_id, CheckpointReported(step))
        self.checkpoint_ages.learn(before, stored.state)
        with self._lock:
            self.config = replace(
                self.config, scheduler=self.checkpoint_ages.applied(self.config.scheduler)
            )
        return stored

    def report_complete(self, instance_id: str, step: int | None) -> StoredInstance:
        return self._user(instance_id, CompletionReported(step))

    def _user(self, instance_id: str, event: LifecycleEvent) -> StoredInstance:
        self.store.instance(instance_id)  # NotFound before anything else
        return self._reported(instance_id, event)

    def _reported(self, instance_id: str, event: LifecycleEvent) -> StoredInstance:
        def decide(state: EngineState, now: Timestamp) -> Decision:
            return Decision(engine.report(state, instance_id, event, now, self.config.scheduler))

        self._decide(decide)
        return self.store.instance(instance_id)

    # The loop's tick -----------------------------------------------------------------------------

    def tick(self) -> Timestamp | None:
        """Take in what the runtime reports, fire due deadlines, schedule, meter; then act."""
        reports = self.runtime.observe()

        def decide(state: EngineState, now: Timestamp) -> Decision:
            state, effects = self._absorb(state, reports, now)
            state, more = absorb_node_reports(state, reports, now, self.config)
            effects += more
            step = engine.tick(state, now, self.config.scheduler)
            step = EngineStep(step.state, (*effects, *step.effects), step.wake_at)
            return Decision(step, extra=self._meter(step.state, now))

        step = self._decide(decide)
        self._forget_orphans(step.state, reports)
        self.run_outbox()
        return step.wake_at

    def _absorb(
        self, state: EngineState, reports: list[WorkloadReport], now: Timestamp
    ) -> tuple[EngineState, list[Effect]]:
        by_allocation = {i.allocation_id: i.id for i in state.instances.values() if i.allocation_id}
        effects: list[Effect] = []
        for report in sorted(reports, key=lambda r: r.allocation_id):
            instance_id = by_allocation.get(report.allocation_id)
            event = _event_for(report)
            if instance_id is None or event is None:
                continue
            step = engine.report(state, instance_id, event, now, self.config.scheduler)
            state, effects = step.state, [*effects, *step.effects]
        return state, effects

    def _forget_orphans(self, state: EngineState, reports: list[WorkloadReport]) -> None:
        """A workload no instance holds any more is never left behind: killed, then forgotten."""
        held = {i.allocation_id for i in state.instances.values() if i.allocation_id}
        held |= node_allocations(state)
        for report in reports:
            if report.allocation_id in held:
                continue
            if report.phase in ("starting", "running"):
                self.runtime.kill(report.allocation_id)
            with suppress(Conflict):  # still dying: forgotten at a later tick, once exited
                self.runtime.forget(report.allocation_id)

    def _meter(self, state: EngineState, now: Timestamp) -> Commit:
        """Usage of every instance (deleted ones too: their last interval may still be open)
        and every volume, for the intervals closed since the last watermark."""
        latest = {s.state.id: s.state for s in self.store.instances(include_deleted=True)}
        latest.update(state.instances)
        spans = [span for inst in latest.values() for span in instance_gpu_spans(inst)]
        spans += node_spans(self.store, state)
        spans += [
            volume_span(
                volume_key(v.account_id, v.name),
                v.account_id,
                v.size_gb,
                v.created_at,
                v.deleted_at,
            )
            for v in self.store.volumes()
        ]
        before = self.store.metered_through()
        records = meter(spans, before, now, self.config.metering_interval_s)
        after = metered_through_after(before, records)
        moved = {key: at for key, at in after.items() if before.get(key) != at}
        if not records:
            return Commit(metered_through=moved)
        ledger, events = billing.charges(
            records, self.catalog, self.store.balances(), self.config.low_balance_usd, now
        )
        return Commit(usage=records, metered_through=moved, ledger=ledger, events=events)

    # Deciding and writing ------------------------------------------------------------------------

    def _decide(self, decide: Callable[[EngineState, Timestamp], Decision]) -> EngineStep:
        if self.standby:
            raise Unavailable(
                "this server is a standby: another server on the same store leads",
                hint="send requests to the leading server, or stop it and this one takes over",
            )
        for attempt in range(MAX_ATTEMPTS):
            with self._lock:
                now = self.clock.now()
                stored = {s.state.id: s for s in self.store.instances()}
                records = ClusterRecords.load(self.store)
                state = engine.state_from_instances(
                    self.hosts,
                    [s.state for s in stored.values()],
                    clusters=records.cluster_states(),
                    nodes=records.node_states(),
                )
                state = replace(state, holds=MappingProxyType(dict(self._holds)))
                decision = decide(state, now)
                commit = records.written(commit_of(decision, stored, now), decision.step.state)
                try:
                    self.store.commit(commit)
                except StaleWrite:
                    if attempt == MAX_ATTEMPTS - 1:
                        raise
                    continue
                self._holds = decision.step.state.holds
            self.wake.set()
            return decision.step
        raise AssertionError("unreachable")  # pragma: no cover

    def run_outbox(self) -> None:
        """Carry out pending effects; the ones done are marked, the others stay for a retry.

        A start that could not be carried out (its volume could not be made, say) is done as an
        effect, and its instance fails with the reason: its GPUs are freed, nothing else waits.
        """
        pending = self.store.pending_outbox()
        if not pending:
            return
        outcome = self._carry_out(pending)
        self.store.mark_done(outcome.done, self.clock.now())
        for instance_id, why in outcome.failed_starts:
            self._user(instance_id, StartFailed(why))

    def queue_position(self, instance_id: str) -> int | None:
        """1-based place in its pool's queue, or None when it is not queued."""
        instances = [s.state for s in self.store.instances()]
        inst = next((i for i in instances if i.id == instance_id), None)
        if inst is None or inst.status is not InstanceStatus.QUEUED:
            return None
        records = ClusterRecords.load(self.store)  # node tickets share the queue
        fleet = engine.state_from_instances(
            self.hosts, instances, nodes=records.node_states()
        ).fleet
        for position, ticket in enumerate(fleet.queue(inst.pool), start=1):
            if ticket.subject_id == instance_id:
                return position
        return None

    def interruption_statistics(self, instance_id: str) -> dict[str, Any]:
        """How often this instance's GPU type is interrupted: for adaptive checkpoint intervals.

        From the `Preempted` events of the last `STATS_WINDOW_S`: interruptions per running
        hour of interruptible work of that type is approximated by interruptions per hour of
        wall time per interruptible instance that was live in the window.
        """
        gpu_type = self.store.instance(instance_id).state.pool.gpu_type
        now = self.clock.now()
        of_type = {
            s.state.id
            for s in self.store.instances(include_deleted=True)
            if s.state.pool.gpu_type == gpu_type
            and s.state.capacity_class is CapacityClass.INTERRUPTIBLE
        }
        times: dict[str, list[int]] = {}
        for e in self.store.events(limit=100_000):
            if (
                e.reason is Reason.PREEMPTED
                and e.object_id in of_type
                and e.at >= now - STATS_WINDOW_S
            ):
                times.setdefault(e.object_id, []).append(e.at)
        gaps = sorted(b - a for t in times.values() for a, b in pairwise(t))
        count = sum(len(t) for t in times.values())
        hours = STATS_WINDOW_S / 3600
        return {
            "gpu_type": gpu_type,
            "interruptions": count,
            "interruptions_per_hour": count / hours / max(1, len(of_type)),
            "median_time_between_interruptions_s": gaps[len(gaps) // 2] if gaps else None,
        }

    def interruption(self, instance_id: str) -> dict[str, Any] | None:
        """The metadata endpoint's answer for a workload: its notice, or None (404)."""
        state = self.store.instance(instance_id).state
        if state.status not in DRAINING:
            return None
        return interruption_notice(state.notice_at, state.deadline)


def volume_key(account_id: str, name: str) -> str:
    """The metering subject of a volume."""
    return f"{account_id}/{name}"


def _event_for(report: WorkloadReport) -> LifecycleEvent | None:
    match report.phase:
        case "running":
            return WorkloadStarted()
        case "exited":
            return WorkloadExited(report.exit_code)
        case "start_failed":
            return StartFailed(report.reason or "the workload could not start")
    return None
