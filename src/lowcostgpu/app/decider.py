"""The decision lock and the live state it guards: every decision is made, written and kept here.

A decision reads `now` once and lets the pure engine decide on the live state the leader keeps
in memory (`app.live`: loaded once when it takes the lead, kept after each commit). What the
step touched is written with its expected versions together with the effects (outbox) and
events in one transaction (`app.live.LiveState.commit_for`). Only then are the effects carried
out — right after the commit, by the thread that decided — and marked done. A conflict
(`StaleWrite`) means the memory disagrees with the store: it is dropped, loaded again, and the
decision is made again.

One object owns the lock, the live state, its meter and the view readers see, because they
change together: a failed write drops all three, and no decision may run on a live state whose
meter or view belongs to another load. The other parts of the plane (the outbox runner, the
metering pass, the tick, the views, the cluster and volume services) decide through `decide` /
`decide_and_write`, and read the live state only under `lock` or as its immutable view
(`written`, `view`). Carrying out a commit's effects is handed in (`carry`) rather than
imported, because the outbox runner decides through this object too.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from functools import partial
from types import MappingProxyType

from lowcostgpu.app import billing
from lowcostgpu.app.commit_batcher import Applied, CommitBatcher
from lowcostgpu.app.context import PlaneContext
from lowcostgpu.app.decisions import Decision, is_empty
from lowcostgpu.app.live import LiveState
from lowcostgpu.app.meter import Meter
from lowcostgpu.app.runtime_reports import ReportObserver
from lowcostgpu.core.engine import EngineState, EngineStep
from lowcostgpu.core.holds import OnDemandHold, with_refusal
from lowcostgpu.core.risk import NO_RISK
from lowcostgpu.domain.capacity import PoolKey, Timestamp
from lowcostgpu.domain.errors import StaleWrite, Unavailable
from lowcostgpu.domain.status import NodeStatus
from lowcostgpu.ports.store_records import Commit, OutboxEntry, VolumeRecord

MAX_ATTEMPTS = 5  # decisions retried after a StaleWrite before giving up
Decided = tuple[Decision, Commit]  # a decision and the commit it was written as


class Decider:
    """Decisions on the live state, one at a time; the commit's effects carried out after it.

    `observer`: told when the live state is dropped (the reports it took in may have been about
    another state). `wake`: set when a request moves the deadline the loop sleeps towards.
    `carry`: carries out a commit's own outbox entries (the outbox runner's `run_entries`)."""

    def __init__(
        self,
        context: PlaneContext,
        *,
        observer: ReportObserver,
        wake: threading.Event,
        carry: Callable[[Sequence[OutboxEntry]], None],
    ) -> None:
        self._context = context
        self._observer = observer
        self._wake = wake
        self._carry = carry
        self.lock = threading.RLock()  # one decision at a time, on one live state
        self.batcher = CommitBatcher[Decided](self.lock, self._write, self._decided_alone)
        self._live: LiveState | None = None  # loaded at the first decision after taking the lead
        self._meter: Meter | None = None
        # What readers see: the live state as of the last decision *written*. A batch's decisions
        # are kept in the live state before their joint write (`app.commit_batcher`), and a
        # reader must not see one that may yet fail to land.
        self._view: EngineState | None = None
        self.planned_wake_at: Timestamp | None = None  # the deadline the loop sleeps towards
        self._kept_holds: Mapping[PoolKey, OnDemandHold] = {}  # across a reload of the state
        self._kept_risk = NO_RISK  # so are the warned (a restart forgets both: `core.risk`)

    # The live state ------------------------------------------------------------------------------

    @property
    def live(self) -> LiveState | None:
        """The live state if it is loaded (read it under `lock`)."""
        return self._live

    @property
    def meter(self) -> Meter | None:
        """The live state's meter if it is loaded (read it under `lock`)."""
        return self._meter

    def written(self) -> EngineState | None:
        """The live state as of the last decision written, None if none is loaded: no lock
        needed (it is immutable), and no decision of a batch in flight is in it."""
        return self._view

    def known_volumes(self) -> Mapping[tuple[str, str], VolumeRecord]:
        """The volumes the meter keeps (deleted ones too): read inside a decision only."""
        assert self._meter is not None  # a decision has loaded the live state
        return self._meter.volumes

    def loaded(self) -> tuple[LiveState, Meter]:
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
                ctx = self._context
                live = LiveState.load(ctx.store, ctx.hosts)
                live.state = replace(live.state, holds=self._kept_holds, risk=self._kept_risk)
                interval_s, now = ctx.config.metering_interval_s, ctx.clock.now()
                self._meter = Meter.load(ctx.store, live, interval_s, now)
                self._live, self._view = live, live.state
            finally:
                if collecting:
                    gc.enable()
            gc.freeze()
        return self._live, self._meter

    def reload(self) -> None:
        """Forget the live state (a lead gained or lost): the next decision loads it again."""
        with self.lock:
            self._drop_live()

    def _drop_live(self) -> None:
        self._observer.missed()  # the state loaded next may not be what the changes were after
        if self._live is not None:
            self._kept_holds = self._live.state.holds
            self._kept_risk = self._live.state.risk
        self._live, self._meter, self._view = None, None, None

    def view(self) -> EngineState:
        """The engine state as of the last decision written, loaded if it is not in memory."""
        view = self._view
        if view is None:
            with self.lock:  # held by no batch in flight: the live state is all written
                live, _ = self.loaded()
                view = self._view = live.state
        return view

    def hold_for(self, pool: PoolKey, gpus: int, account_id: str) -> None:
        """A refused on-demand customer: GPUs that free in the pool wait for their retry."""
        with self.lock:
            live, _ = self.loaded()
            hold_s = self._context.config.scheduler.on_demand_hold_s
            now = self._context.clock.now()
            holds = with_refusal(live.state.holds, pool, gpus, now, hold_s, account_id)
            live.state = replace(live.state, holds=MappingProxyType(holds))
            self._view = live.state  # under the lock: no decision is waiting for its write
        self._wake.set()  # the loop must tick when the hold ends

    # Deciding and writing ------------------------------------------------------------------------

    def decide(
        self,
        decide: Callable[[EngineState, Timestamp], Decision],
        *,
        adopt: str | None = None,
        wake: bool = True,
    ) -> EngineStep:
        """`decided_and_done`, for callers that want the step (the tick, cluster requests)."""
        return self.decided_and_done(decide, adopt=adopt, wake=wake)[0].step

    def decide_and_write(
        self,
        decide: Callable[[EngineState, Timestamp], Decision],
        *,
        adopt: str | None = None,
        batched: bool = False,
    ) -> Commit:
        """`decided_and_done`, for callers that answer with what was written."""
        return self.decided_and_done(decide, adopt=adopt, batched=batched)[1]

    def decided_and_done(
        self,
        decide: Callable[[EngineState, Timestamp], Decision],
        *,
        adopt: str | None = None,
        wake: bool = True,
        batched: bool = False,
    ) -> Decided:
        """Decide on the live state, write what the step touched, keep it, carry out its effects.

        `adopt`: an instance the decision is about, brought back into the live state if it had
        left it (a resume of a stopped instance). `wake`: whether the loop may need waking (a
        request may have moved the next deadline; the loop's own tick need not wake itself).
        `batched`: written together with the other requests waiting for the lock meanwhile
        (`app.commit_batcher`: group commit), with the same answer and errors as alone."""
        if self._context.standby:
            raise Unavailable(
                "this server is a standby: another server on the same store leads",
                hint="send requests to the leading server, or stop it and this one takes over",
            )
        apply = partial(self._applied, decide, adopt)
        if batched:
            decision, commit = self.batcher.submit(apply)
        else:
            decision, commit = self._decided_alone(apply)
        self._carry(commit.outbox)
        if wake and self._moves_wake(decision.step.wake_at):
            self._wake.set()
        return decision, commit

    def _decided_alone(self, apply: Callable[[], Applied[Decided]]) -> Decided:
        """Decide and write one request; after a `StaleWrite` (the memory disagrees with the
        store) the live state is loaded again and the decision made again."""
        for attempt in range(MAX_ATTEMPTS):
            with self.lock:
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
            self._context.store.commit(commit)
        except BaseException:
            self._drop_live()
            raise

    def _moves_wake(self, wake_at: Timestamp | None) -> bool:
        """Whether a request's step brings the next deadline before the one the loop sleeps
        towards (a reclaim's grace, a hold): only then is the loop woken. Other requests leave
        it asleep — their effects are carried out already — so a busy API does not make the loop
        spin."""
        planned = self.planned_wake_at
        if wake_at is None or (planned is not None and wake_at >= planned):
            return False
        self.planned_wake_at = wake_at
        return True

    def _applied(
        self, decide: Callable[[EngineState, Timestamp], Decision], adopt: str | None
    ) -> Applied[Decided]:
        """Decide on the live state and keep the result there, not yet written (the caller
        writes it, or drops the live state if the write fails). Under the decision lock."""
        ctx = self._context
        live, meter = self.loaded()
        if adopt is not None and adopt not in live.state.instances:
            live.adopt(ctx.store.instance(adopt))
            meter.adopted(ctx.store, adopt)
        now = ctx.clock.now()
        try:
            decision = decide(live.state, now)
        except BaseException:
            if adopt is not None:
                live.let_go(adopt)
            raise
        commit = live.commit_for(decision, now)
        if ctx.config.credit_lost_work:  # in the commit that ends the drain: exactly once
            commit = billing.with_lost_work_credits(commit, decision.step, ctx.catalog)
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
