"""The control plane: every request and every tick is one decision, written before it is acted on.

A decision reads `now` once and lets the pure engine decide on the live state the leader keeps
in memory (`app.live`: loaded once when it takes the lead, kept after each commit). What the
step touched is written with its expected versions together with the effects (outbox) and
events in one transaction (`app.live.LiveState.commit_for`). Only then are the effects carried
out — right after the commit, by the thread that decided — and marked done. A conflict
(`StaleWrite`) means the memory disagrees with the store: it is dropped, loaded again, and the
decision is made again. Metering (`app.meter`) cuts the open spans when an interval closes.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from functools import partial
from types import MappingProxyType
from typing import Any

from lowcostgpu.app import billing
from lowcostgpu.app.clusters import ClusterService
from lowcostgpu.app.commit_batcher import Applied, CommitBatcher
from lowcostgpu.app.context import PlaneConfig as PlaneConfig  # the wiring imports it from here
from lowcostgpu.app.context import PlaneContext
from lowcostgpu.app.decisions import (
    Decision,
    is_empty,
    stamped,
    written_instance,
)
from lowcostgpu.app.effects import Outcome, Settled, give_up_reason, settled, start_applies
from lowcostgpu.app.launch import FleetPools, LaunchRequest, build_launch
from lowcostgpu.app.live import LiveState
from lowcostgpu.app.meter import PASS_PAUSE_S, Meter, pass_commits
from lowcostgpu.app.runtime_reports import (
    ReportObserver,
    changing_reports,
    held,
    merged,
    node_exits,
)
from lowcostgpu.app.volumes import VolumeService, checkpoint_held, launched_on, reports_a_step
from lowcostgpu.core import engine
from lowcostgpu.core.checkpoint_ages import CheckpointAges
from lowcostgpu.core.drain import interruption_notice
from lowcostgpu.core.engine import EngineState, EngineStep
from lowcostgpu.core.holds import OnDemandHold, with_refusal
from lowcostgpu.core.instance_state import DRAINING
from lowcostgpu.core.lifecycle import (
    CheckpointReported,
    CompletionReported,
    DeleteRequested,
    LifecycleEvent,
    ResumeRequested,
    SignalSent,
    StartFailed,
    StopRequested,
)
from lowcostgpu.core.metering import MeterKey, UsageRecord
from lowcostgpu.core.risk import NO_RISK
from lowcostgpu.core.scheduler import SchedulerConfig
from lowcostgpu.domain.capacity import Host, PoolKey, Timestamp
from lowcostgpu.domain.catalog import Catalog
from lowcostgpu.domain.errors import Conflict, InsufficientCapacity, StaleWrite, Unavailable
from lowcostgpu.domain.status import NodeStatus
from lowcostgpu.ports.clock import Clock, IdSource
from lowcostgpu.ports.runtime import Runtime, Volumes, WorkloadReport
from lowcostgpu.ports.store import (
    Commit,
    EventRecord,
    LedgerEntry,
    OutboxEntry,
    Store,
    StoredInstance,
    VolumeRecord,
)

log = logging.getLogger(__name__)
MAX_ATTEMPTS = 5  # decisions retried after a StaleWrite before giving up
STANDBY_VIEW_S = 2  # how long a standby's reads share one load of the live rows
Decided = tuple[Decision, Commit]  # a decision and the commit it was written as


class ControlPlane:
    """Decisions on the live state; effects are carried out right after each commit.

    Cluster requests (`create_cluster`, `update_cluster_target`, `get_cluster`, `list_clusters`,
    `delete_cluster`) are `self.clusters`, an `app.clusters.ClusterService` deciding through
    `_decide`.

    `store`, `runtime`, `clock`, `hosts`, `catalog`, `config` and `standby` are kept in
    `self.context`, which every part reads at each use: what is set here (the loop sets
    `standby`, a checkpoint report `config`, a test its own store) is what they all see next."""

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
        self.context = PlaneContext(store, runtime, clock, list(hosts), catalog, config)
        self.ids = ids
        self.pools = FleetPools(self.hosts)
        self._carry_out = carry_out
        self.volumes: Volumes | None = None  # set by the wiring: where a launch's volume must fit
        self._lock = threading.RLock()  # one decision at a time, on one live state
        self._outbox_lock = threading.Lock()  # one carrier of effects at a time
        self._batcher = CommitBatcher[Decided](self._lock, self._write, self._decided_alone)
        self.wake = threading.Event()  # set when a request may have changed the next wake-up
        self._live: LiveState | None = None  # loaded at the first decision after taking the lead
        # What readers see: the live state as of the last decision *written*. A batch's decisions
        # are kept in the live state before their joint write (`app.commit_batcher`), and a
        # reader must not see one that may yet fail to land.
        self._view: EngineState | None = None
        self._planned_wake_at: Timestamp | None = None  # the deadline the loop sleeps towards
        self._meter: Meter | None = None
        self._kept_holds: Mapping[PoolKey, OnDemandHold] = {}  # across a reload of the state
        self._kept_risk = NO_RISK  # so are the warned (a restart forgets both: `core.risk`)
        self._standby_lock = threading.Lock()
        self._standby_state: tuple[Timestamp, EngineState] | None = None  # (loaded at, state)
        self.checkpoint_ages = CheckpointAges()  # what the fairness policy charges non-reporters
        self.observer = ReportObserver()  # which runtime reports a tick takes in
        self.clusters = ClusterService(
            store=store,
            ids=ids,
            pools=self.pools,
            catalog=catalog,
            scheduler=lambda: self.config.scheduler,  # the config changes at run time
            decide=self._decide,
            whole_host_nodes=lambda: self.config.whole_host_nodes,
            risk=lambda: self.snapshot().risk,
        )

        self.volume_service = VolumeService(
            store=store, decide=self._decide_and_write, known=self._known_volumes
        )

    # What the parts share (`self.context`) ------------------------------------------------------

    @property
    def store(self) -> Store:
        return self.context.store

    @store.setter
    def store(self, store: Store) -> None:
        self.context.store = store

    @property
    def runtime(self) -> Runtime:
        return self.context.runtime

    @runtime.setter
    def runtime(self, runtime: Runtime) -> None:
        self.context.runtime = runtime

    @property
    def clock(self) -> Clock:
        return self.context.clock

    @clock.setter
    def clock(self, clock: Clock) -> None:
        self.context.clock = clock

    @property
    def hosts(self) -> list[Host]:
        return self.context.hosts

    @hosts.setter
    def hosts(self, hosts: list[Host]) -> None:
        self.context.hosts = hosts

    @property
    def catalog(self) -> Catalog:
        return self.context.catalog

    @catalog.setter
    def catalog(self, catalog: Catalog) -> None:
        self.context.catalog = catalog

    @property
    def config(self) -> PlaneConfig:
        return self.context.config

    @config.setter
    def config(self, config: PlaneConfig) -> None:
        self.context.config = config

    @property
    def standby(self) -> bool:
        """A standby server (another holds the store's lead) decides nothing (`PlaneContext`)."""
        return self.context.standby

    @standby.setter
    def standby(self, standby: bool) -> None:
        self.context.standby = standby

    # The live state ------------------------------------------------------------------------------

    def _known_volumes(self) -> Mapping[tuple[str, str], VolumeRecord]:
        """The volumes the meter keeps (deleted ones too): read inside a decision only."""
        assert self._meter is not None  # a decision has loaded the live state
        return self._meter.volumes

    def _loaded(self) -> tuple[LiveState, Meter]:
        """The live state, loaded from the store if it is not in memory. On-demand holds are
        soft and not stored: they survive a reload (but not a restart)."""
        if self._live is None or self._meter is None:
            # The live state is a large, long-lived heap (110,000 instances: millions of
            # objects) and has no cycles to collect: the collector is off while it is built
            # (else each full collection rescans what is built so far), and it is then moved
            # out of the collector's view, so that no full collection pauses a decision for
            # hundreds of milliseconds rescanning it.
            collecting = gc.isenabled()
            gc.disable()
            try:
                live = LiveState.load(self.store, self.hosts)
                live.state = replace(live.state, holds=self._kept_holds, risk=self._kept_risk)
                interval_s, now = self.config.metering_interval_s, self.clock.now()
                self._meter = Meter.load(self.store, live, interval_s, now)
                self._live, self._view = live, live.state
            finally:
                if collecting:
                    gc.enable()
            gc.freeze()
        return self._live, self._meter

    def reload(self) -> None:
        """Forget the live state (a lead gained or lost): the next decision loads it again."""
        with self._lock:
            self._drop_live()

    def _drop_live(self) -> None:
        self.observer.missed()  # the state loaded next may not be what the changes were after
        if self._live is not None:
            self._kept_holds = self._live.state.holds
            self._kept_risk = self._live.state.risk
        self._live, self._meter, self._view = None, None, None

    def snapshot(self) -> EngineState:
        """The engine state as of the last decision written: immutable, so readers need no lock.
        A standby reads the store instead (it keeps no live state)."""
        if self.standby:
            return self._standby_view()
        view = self._view
        if view is None:
            with self._lock:  # held by no batch in flight: the live state is all written
                live, _ = self._loaded()
                view = self._view = live.state
        return view

    def _standby_view(self) -> EngineState:
        """A standby's reads share one load of the live rows for `STANDBY_VIEW_S` (a load costs
        seconds at 110,000 live: not one per request)."""
        with self._standby_lock:
            now = self.clock.now()
            kept = self._standby_state
            if kept is None or now - kept[0] >= STANDBY_VIEW_S:
                kept = self._standby_state = (now, LiveState.load(self.store, self.hosts).state)
            return kept[1]

    # Requests ----------------------------------------------------------------------------------

    def launch(self, request: LaunchRequest) -> StoredInstance:
        instance_id = self.ids.new_id("i")
        spec, record = build_launch(request, instance_id, self.catalog, self.pools, self.volumes)

        def decide(state: EngineState, now: Timestamp) -> Decision:
            attached, extra = launched_on(self._known_volumes(), record, now)  # refused first
            step = engine.launch(state, spec, now, self.config.scheduler)
            return Decision(step, {instance_id: stamped(attached, now)}, extra)

        try:
            commit = self._decide_and_write(decide, batched=True)
        except InsufficientCapacity:
            self._hold_for(spec.pool, spec.gpus, spec.account_id)
            raise
        return written_instance(commit, instance_id, None)

    def _hold_for(self, pool: PoolKey, gpus: int, account_id: str) -> None:
        """A refused on-demand customer: GPUs that free in the pool wait for their retry."""
        with self._lock:
            live, _ = self._loaded()
            hold_s = self.config.scheduler.on_demand_hold_s
            now = self.clock.now()
            holds = with_refusal(live.state.holds, pool, gpus, now, hold_s, account_id)
            live.state = replace(live.state, holds=MappingProxyType(holds))
            self._view = live.state  # under the lock: no decision is waiting for its write
        self.wake.set()  # the loop must tick when the hold ends

    def stop(self, instance_id: str) -> StoredInstance:
        return self._user(instance_id, StopRequested())

    def resume(self, instance_id: str) -> StoredInstance:
        return self._user(instance_id, ResumeRequested())

    def delete(self, instance_id: str) -> StoredInstance:
        return self._user(instance_id, DeleteRequested())

    def report_checkpoint(
        self,
        instance_id: str,
        step: int,
        *,
        save_s: int | None = None,
        saves_on_notice: bool = False,
    ) -> StoredInstance:
        """A durable checkpoint, with what the workload says of its saves (`CheckpointReported`):
        victim choice charges a believed saver its save time."""
        before = self.store.instance(instance_id)  # NotFound before anything else
        stored = self._reported(before, CheckpointReported(step, save_s, saves_on_notice))
        self.checkpoint_ages.learn(before.state, stored.state)
        with self._lock:
            self.config = replace(
                self.config, scheduler=self.checkpoint_ages.applied(self.config.scheduler)
            )
        return stored

    def report_complete(self, instance_id: str, step: int | None) -> StoredInstance:
        return self._user(instance_id, CompletionReported(step))

    def _user(self, instance_id: str, event: LifecycleEvent) -> StoredInstance:
        return self._reported(self.store.instance(instance_id), event)  # NotFound first

    def _reported(self, stored: StoredInstance, event: LifecycleEvent) -> StoredInstance:
        instance_id = stored.state.id

        def decide(state: EngineState, now: Timestamp) -> Decision:
            step = engine.report(state, instance_id, event, now, self.config.scheduler)
            inst = step.state.instances.get(instance_id) if reports_a_step(event) else None
            return Decision(step, extra=checkpoint_held(self._known_volumes(), stored.launch, inst))

        commit = self._decide_and_write(decide, adopt=instance_id)
        return written_instance(commit, instance_id, stored)

    # The loop's tick -----------------------------------------------------------------------------

    def tick(self) -> Timestamp | None:
        """The loop's tick: a decision step, then a metering pass if an interval closed."""
        wake_at = self.step()
        self.meter_if_due()
        return wake_at

    def step(self) -> Timestamp | None:
        """Take in what the runtime reports, fire due deadlines, schedule; then act. Returns
        when the loop must step again at the latest."""
        reports = self.observer.reports(self.runtime, self.clock.now())

        def decide(state: EngineState, now: Timestamp) -> Decision:
            changing = changing_reports(state, reports)
            step = engine.tick(state, now, self.config.scheduler, changing)
            step = merged(step, node_exits(step.state, reports, now, self.config.scheduler))
            return Decision(step)

        try:
            step = self._decide(decide, wake=False)
        except BaseException:
            self.observer.missed()  # the reports taken in were not acted on
            raise
        self._planned_wake_at = step.wake_at
        self.observer.keep(self._forget_orphans(step.state, reports))
        self.run_outbox()
        return step.wake_at

    def meter_if_due(self) -> None:
        """A metering pass when an interval has closed: what may owe usage is cut from the live
        state under the decision lock, then rated and written without it, in chunks (`app.meter`
        `pass_commits`), so that decisions go on meanwhile."""
        with self._lock:
            meter, now = self._meter, self.clock.now()
            if self.standby or self._live is None or meter is None or not meter.due(now):
                return
            cut = meter.cut(self._live.state)
        moved: dict[MeterKey, Timestamp] = {}
        charge = partial(self._charges, now=now)
        interval_s = meter.interval_s
        try:
            for n, commit in enumerate(pass_commits(cut, now, interval_s, charge)):
                if n:
                    time.sleep(PASS_PAUSE_S)  # let requests run between the chunks
                self.store.commit(commit)
                moved.update(commit.metered_through)
        except BaseException:
            with self._lock:  # the chunks that landed are not metered again by the retry
                meter.through.update(moved)
            raise
        with self._lock:
            if self._meter is meter and self._live is not None:
                meter.passed(self._live.state, moved, now)

    def _charges(
        self, records: list[UsageRecord], *, now: Timestamp
    ) -> tuple[list[LedgerEntry], list[EventRecord]]:
        """The ledger entries and BalanceLow events of records, from the balances now (only
        the accounts they name are read)."""
        balances = self.store.balances_of({r.account_id for r in records})
        return billing.charges(records, self.catalog, balances, self.config.low_balance_usd, now)

    def _forget_orphans(
        self, state: EngineState, reports: list[WorkloadReport]
    ) -> list[WorkloadReport]:
        """A workload no instance holds any more is never left behind: killed, then forgotten.
        Returns those not forgotten yet, tried again at the next tick. Cost: O(reports)."""
        left = []
        for report in reports:
            if held(state, report):
                continue
            try:
                if report.phase in ("starting", "running"):
                    self.runtime.kill(report.allocation_id)
                self.runtime.forget(report.allocation_id)
            except Conflict:  # still dying: forgotten at a later tick, once exited
                left.append(report)
            except Exception as exc:  # one workload's failing kill stops no tick: tried again
                log.warning("orphan %s not killed yet: %s", report.allocation_id, exc)
                left.append(report)
        return left

    # Deciding and writing ------------------------------------------------------------------------

    def _decide(
        self,
        decide: Callable[[EngineState, Timestamp], Decision],
        *,
        adopt: str | None = None,
        wake: bool = True,
    ) -> EngineStep:
        """`_decided_and_done`, for callers that want the step (the tick, cluster requests)."""
        return self._decided_and_done(decide, adopt=adopt, wake=wake)[0].step

    def _decide_and_write(
        self,
        decide: Callable[[EngineState, Timestamp], Decision],
        *,
        adopt: str | None = None,
        batched: bool = False,
    ) -> Commit:
        """`_decided_and_done`, for callers that answer with what was written."""
        return self._decided_and_done(decide, adopt=adopt, batched=batched)[1]

    def _decided_and_done(
        self,
        decide: Callable[[EngineState, Timestamp], Decision],
        *,
        adopt: str | None = None,
        wake: bool = True,
        batched: bool = False,
    ) -> tuple[Decision, Commit]:
        """Decide on the live state, write what the step touched, keep it, carry out its effects.

        `adopt`: an instance the decision is about, brought back into the live state if it had
        left it (a resume of a stopped instance). `wake`: whether the loop may need waking (a
        request may have moved the next deadline; the loop's own tick need not wake itself).
        `batched`: written together with the other requests waiting for the lock meanwhile
        (`app.commit_batcher`: group commit), with the same answer and errors as alone."""
        if self.standby:
            raise Unavailable(
                "this server is a standby: another server on the same store leads",
                hint="send requests to the leading server, or stop it and this one takes over",
            )
        apply = partial(self._applied, decide, adopt)
        if batched:
            decision, commit = self._batcher.submit(apply)
        else:
            decision, commit = self._decided_alone(apply)
        self._run_entries(commit.outbox)
        if wake and self._moves_wake(decision.step.wake_at):
            self.wake.set()
        return decision, commit

    def _decided_alone(self, apply: Callable[[], Applied[Decided]]) -> Decided:
        """Decide and write one request; after a `StaleWrite` (the memory disagrees with the
        store) the live state is loaded again and the decision made again."""
        for attempt in range(MAX_ATTEMPTS):
            with self._lock:
                try:
                    applied = apply()
                    self._write(applied.commit)
                except StaleWrite:
                    self._drop_live()
                    if attempt == MAX_ATTEMPTS - 1:
                        raise
                    continue
                applied.landed()
                return applied.value
        raise AssertionError("unreachable")  # pragma: no cover

    def _write(self, commit: Commit) -> None:
        """Write a decision's (or a batch's) commit; if it fails the live state, which holds the
        decision already, is dropped (a `StaleWrite`, or not known whether it landed)."""
        if is_empty(commit):
            return
        try:
            self.store.commit(commit)
        except BaseException:
            self._drop_live()
            raise

    def _moves_wake(self, wake_at: Timestamp | None) -> bool:
        """Whether a request's step brings the next deadline before the one the loop sleeps
        towards (a reclaim's grace, a hold): only then is the loop woken. Other requests leave
        it asleep — their effects are carried out already — so a busy API does not make the loop
        spin."""
        planned = self._planned_wake_at
        if wake_at is None or (planned is not None and wake_at >= planned):
            return False
        self._planned_wake_at = wake_at
        return True

    def _applied(
        self, decide: Callable[[EngineState, Timestamp], Decision], adopt: str | None
    ) -> Applied[Decided]:
        """Decide on the live state and keep the result there, not yet written (the caller
        writes it, or drops the live state if the write fails). Under the decision lock."""
        live, meter = self._loaded()
        if adopt is not None and adopt not in live.state.instances:
            live.adopt(self.store.instance(adopt))
            meter.adopted(self.store, adopt)
        now = self.clock.now()
        try:
            decision = decide(live.state, now)
        except BaseException:
            if adopt is not None:
                live.let_go(adopt)
            raise
        commit = live.commit_for(decision, now)
        if self.config.credit_lost_work:  # in the commit that ends the drain: exactly once
            commit = billing.with_lost_work_credits(commit, decision.step, self.catalog)
        gone = live.committed(decision, commit)
        if adopt is not None:
            live.let_go(adopt)  # a request that left it where it was (a repeated delete)
        meter.touched(live.state, decision.step.touched.instances)
        meter.left(gone)
        meter.nodes_left(n.state for n in commit.nodes if n.state.status is NodeStatus.REMOVED)
        meter.volumes_written(commit.volumes)
        state = live.state

        def landed() -> None:
            self._view = state

        return Applied((decision, commit), commit, landed)

    def _run_entries(self, entries: Sequence[OutboxEntry]) -> None:
        """Carry out a commit's own effects, right after it."""
        self._carry(lambda: entries)

    def run_outbox(self) -> None:
        """Carry out effects still pending and due (retries, and what a crash left): the partial
        index on pending entries by their next attempt makes this O(due)."""
        self._carry(lambda: self.store.pending_outbox(due_at=self.clock.now()))

    def _carry(self, entries_of: Callable[[], Sequence[OutboxEntry]]) -> None:
        """Carry out effects and mark the done ones; one carrier at a time, from reading the
        entries to marking them.

        An entry that fails, whatever it raised, stops nothing else: its failure is written on it
        and it is due again after a backoff (`core.retries`). A start that no longer applies is
        dropped. A start given up fails its instance with the reason (its GPUs are freed) before
        the entry is marked done, so a crash in between gives it up again rather than losing it.
        """
        with self._outbox_lock:
            entries = entries_of()
            if not entries:
                return
            view = self._view  # what was written: a start a batch in flight moves still applies
            instances = view.instances if view is not None else None
            applying = [e for e in entries if instances is None or self._applies(e, instances)]
            outcome = self._carry_out(applying)
            now = self.clock.now()
            after = settled(outcome.failed, now, self.config.effect_retry)
            self.store.record_failures(after.failures)
            dropped = [e.key for e in entries if e not in applying]
            self.store.mark_done([*outcome.done, *dropped], now)
        self._give_up(after)
        self._stamp(outcome.signalled)

    def _stamp(self, signalled: Sequence[tuple[str, SignalSent]]) -> None:
        """The drains whose SIGTERM went out count their grace from it (`core.drain`
        `signal_stamp`). A failure here leaves the decision's deadline (what the workload was
        told): logged, not raised, like a crash between the signal and this write."""
        if not signalled or self.standby:
            return
        try:
            self._decide(lambda state, now: Decision(engine.signals_sent(state, signalled, now)))
        except Exception as exc:  # the signal is out; only the stamp is lost
            log.warning("the SIGTERM times of %d drain(s) not recorded: %s", len(signalled), exc)

    @staticmethod
    def _applies(entry: OutboxEntry, instances: Mapping[str, Any]) -> bool:
        return start_applies(entry, instances.get(str(entry.payload.get("subject_id", ""))))

    def _give_up(self, after: Settled) -> None:
        """Act on the given-up entries, then mark them done. A start fails its instance; a
        signal is followed by its deadline's kill; a kill's instance has ended already (the
        orphan sweep kills what still runs); a node effect is recorded on its entry."""
        gone: list[str] = []
        for failure, verdict in after.given_up:
            entry = failure.entry
            if entry.kind == "StartWorkload":
                try:
                    self._fail_start(entry, give_up_reason(failure, verdict))
                except Exception as exc:  # the entry stays pending: given up again later
                    log.warning("could not fail the start %s yet: %s", entry.key, exc)
                    continue
            gone.append(entry.key)
        self.store.mark_done(gone, self.clock.now())

    def _fail_start(self, entry: OutboxEntry, why: str) -> None:
        """Fail the start's instance, if it is still starting on that allocation."""
        instance_id = str(entry.payload["subject_id"])
        allocation_id = entry.payload.get("allocation_id")

        def decide(state: EngineState, now: Timestamp) -> Decision:
            s = state.instances.get(instance_id)
            if s is None or s.rank_of(str(allocation_id)) is None:
                return Decision(EngineStep(state))  # it moved on: nothing to fail
            failed = StartFailed(why, str(allocation_id))
            return Decision(engine.report(state, instance_id, failed, now, self._sched))

        self._decide(decide)

    @property
    def _sched(self) -> SchedulerConfig:
        return self.config.scheduler

    def interruption(self, instance_id: str) -> dict[str, Any] | None:
        """The metadata endpoint's answer for a workload: its notice, or None (404)."""
        state = self.store.instance(instance_id).state
        if state.status not in DRAINING:
            return None
        return interruption_notice(state.notice_at, state.deadline)
