"""The loop's tick: what the runtime reports taken in, due deadlines fired, then what is owed.

A tick is the one decision nobody asks for (`app.loop.ReconcileLoop` calls it): it takes in the
runtime's reports (only the changes between full looks: `app.runtime_reports.ReportObserver`),
lets the engine fire due deadlines and schedule, and writes that like any request. After it, in
this order: the workloads no instance holds any more are killed and forgotten, the effects still
pending and due are carried out, and a metering pass runs if an interval has closed. The deadline
the step returns is what the loop sleeps towards; requests wake it only to bring it forward
(`app.decider.Decider.planned_wake_at`).
"""

from __future__ import annotations

import logging

from lowcostgpu.app.context import PLANE_LOGGER, PlaneContext
from lowcostgpu.app.decider import Decider
from lowcostgpu.app.decisions import Decision
from lowcostgpu.app.meter_pass import MeteringPass
from lowcostgpu.app.outbox import OutboxRunner
from lowcostgpu.app.runtime_reports import (
    ReportObserver,
    changing_reports,
    held,
    merged,
    node_exits,
)
from lowcostgpu.core import engine
from lowcostgpu.core.engine import EngineState
from lowcostgpu.domain.capacity import Timestamp
from lowcostgpu.domain.errors import Conflict
from lowcostgpu.ports.runtime import WorkloadReport

log = logging.getLogger(PLANE_LOGGER)


class Ticker:
    """The tick, over the live state `decider` keeps; `outbox` and `metering` run after it."""

    def __init__(
        self,
        context: PlaneContext,
        *,
        decider: Decider,
        observer: ReportObserver,
        outbox: OutboxRunner,
        metering: MeteringPass,
    ) -> None:
        self._context = context
        self._decider = decider
        self._observer = observer
        self._outbox = outbox
        self._metering = metering

    def tick(self) -> Timestamp | None:
        """The loop's tick: a decision step, then a metering pass if an interval closed."""
        wake_at = self.step()
        self._metering.meter_if_due()
        return wake_at

    def step(self) -> Timestamp | None:
        """Take in what the runtime reports, fire due deadlines, schedule; then act. Returns
        when the loop must step again at the latest."""
        ctx = self._context
        reports = self._observer.reports(ctx.runtime, ctx.clock.now())

        def decide(state: EngineState, now: Timestamp) -> Decision:
            changing = changing_reports(state, reports)
            step = engine.tick(state, now, ctx.config.scheduler, changing)
            step = merged(step, node_exits(step.state, reports, now, ctx.config.scheduler))
            return Decision(step)

        try:
            step = self._decider.decide(decide, wake=False)
        except BaseException:
            self._observer.missed()  # the reports taken in were not acted on
            raise
        self._decider.planned_wake_at = step.wake_at
        self._observer.keep(self._forget_orphans(step.state, reports))
        self._outbox.run_outbox()
        return step.wake_at

    def _forget_orphans(
        self, state: EngineState, reports: list[WorkloadReport]
    ) -> list[WorkloadReport]:
        """A workload no instance holds any more is never left behind: killed, then forgotten.
        Returns those not forgotten yet, tried again at the next tick. Cost: O(reports)."""
        ctx = self._context
        left = []
        for report in reports:
            if held(state, report):
                continue
            try:
                if report.phase in ("starting", "running"):
                    ctx.runtime.kill(report.allocation_id)
                ctx.runtime.forget(report.allocation_id)
            except Conflict:  # still dying: forgotten at a later tick, once exited
                left.append(report)
            except Exception as exc:  # one workload's failing kill stops no tick: tried again
                log.warning("orphan %s not killed yet: %s", report.allocation_id, exc)
                left.append(report)
        return left
