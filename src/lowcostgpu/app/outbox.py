"""The outbox runner: a commit's effects carried out after it, and what is still pending retried.

Effects are written with the decision that produced them (the outbox) and carried out only after
that commit has landed: right after it by the thread that decided (`run_entries`), and by the
loop for what is still pending and due — retries, and what a crash left (`run_outbox`). What
carrying one out does is the effect runner's (`app.effects.EffectRunner`, handed in as
`carry_out`); what follows from the outcome is here: failures written on their entries,
starts that no longer apply dropped, given-up starts failing their instances, and the drains
whose SIGTERM went out stamped with the time it was sent. The last two are decisions, made
through the decider handed in (`decide`): this module does not import the plane.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from lowcostgpu.app.context import PLANE_LOGGER, PlaneContext
from lowcostgpu.app.decisions import Decision
from lowcostgpu.app.effects import Outcome, Settled, give_up_reason, settled, start_applies
from lowcostgpu.core import engine
from lowcostgpu.core.engine import EngineState, EngineStep
from lowcostgpu.core.lifecycle import SignalSent, StartFailed
from lowcostgpu.domain.capacity import Timestamp
from lowcostgpu.ports.store_records import OutboxEntry

log = logging.getLogger(PLANE_LOGGER)

Decide = Callable[[Callable[[EngineState, Timestamp], Decision]], EngineStep]
"""How the runner decides (`app.decider.Decider.decide`): written, kept, effects carried out."""


class OutboxRunner:
    """Carries out effects, one carrier at a time, and acts on their outcome.

    `written`: the live state as of the last decision written (`Decider.written`), None when
    none is loaded; what says whether a start still applies."""

    def __init__(
        self,
        context: PlaneContext,
        *,
        carry_out: Callable[[Sequence[OutboxEntry]], Outcome],
        decide: Decide,
        written: Callable[[], EngineState | None],
    ) -> None:
        self._context = context
        self._carry_out = carry_out
        self._decide = decide
        self._written = written
        self._lock = threading.Lock()  # one carrier of effects at a time

    def run_entries(self, entries: Sequence[OutboxEntry]) -> None:
        """Carry out a commit's own effects, right after it."""
        self._carry(lambda: entries)

    def run_outbox(self) -> None:
        """Carry out effects still pending and due (retries, and what a crash left): the partial
        index on pending entries by their next attempt makes this O(due)."""
        ctx = self._context
        self._carry(lambda: ctx.store.pending_outbox(due_at=ctx.clock.now()))

    def _carry(self, entries_of: Callable[[], Sequence[OutboxEntry]]) -> None:
        """Carry out effects and mark the done ones; one carrier at a time, from reading the
        entries to marking them.

        An entry that fails, whatever it raised, stops nothing else: its failure is written on it
        and it is due again after a backoff (`core.retries`). A start that no longer applies is
        dropped. A start given up fails its instance with the reason (its GPUs are freed) before
        the entry is marked done, so a crash in between gives it up again rather than losing it.
        """
        ctx = self._context
        with self._lock:
            entries = entries_of()
            if not entries:
                return
            # What was written: a start a batch in flight moves still applies.
            view = self._written()
            instances = view.instances if view is not None else None
            applying = [e for e in entries if instances is None or self._applies(e, instances)]
            outcome = self._carry_out(applying)
            now = ctx.clock.now()
            after = settled(outcome.failed, now, ctx.config.effect_retry)
            ctx.store.record_failures(after.failures)
            dropped = [e.key for e in entries if e not in applying]
            ctx.store.mark_done([*outcome.done, *dropped], now)
        self._give_up(after)
        self._stamp(outcome.signalled)

    def _stamp(self, signalled: Sequence[tuple[str, SignalSent]]) -> None:
        """The drains whose SIGTERM went out count their grace from it (`core.drain`
        `signal_stamp`). A failure here leaves the decision's deadline (what the workload was
        told): logged, not raised, like a crash between the signal and this write."""
        if not signalled or self._context.standby:
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
        self._context.store.mark_done(gone, self._context.clock.now())

    def _fail_start(self, entry: OutboxEntry, why: str) -> None:
        """Fail the start's instance, if it is still starting on that allocation."""
        instance_id = str(entry.payload["subject_id"])
        allocation_id = entry.payload.get("allocation_id")

        def decide(state: EngineState, now: Timestamp) -> Decision:
            s = state.instances.get(instance_id)
            if s is None or s.rank_of(str(allocation_id)) is None:
                return Decision(EngineStep(state))  # it moved on: nothing to fail
            failed = StartFailed(why, str(allocation_id))
            scheduler = self._context.config.scheduler
            return Decision(engine.report(state, instance_id, failed, now, scheduler))

        self._decide(decide)
