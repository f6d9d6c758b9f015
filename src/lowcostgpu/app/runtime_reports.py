"""What the runtime reported, as the engine's input: only reports that change something.

Runtimes report level-triggered (every workload at every `observe`, so nothing is lost in a
crash). At 10,000 workloads, taking in and filtering every report costs ~13 ms a tick, which is
all an idle server does; so the loop asks a runtime that can say it only for what changed since
its last look (`ReportObserver`, `ports.runtime.ChangeReporting`), and for everything only when
it must: at the first tick after the live state was (re)loaded, after a tick that failed (what
it had taken in was not written), and every `FULL_REPORT_EVERY_S`. The reports it takes in that
repeat what the live state says are dropped without touching the engine (`changing_reports`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from lowcostgpu.core import cluster_engine
from lowcostgpu.core.engine import EngineState, EngineStep
from lowcostgpu.core.lifecycle import (
    InstanceState,
    LifecycleEvent,
    StartFailed,
    WorkloadExited,
    WorkloadStarted,
)
from lowcostgpu.core.scheduler import SchedulerConfig
from lowcostgpu.domain.capacity import Timestamp
from lowcostgpu.domain.status import InstanceStatus
from lowcostgpu.ports.runtime import Runtime, WorkloadReport

log = logging.getLogger(__name__)
FULL_REPORT_EVERY_S = 300  # a full look at the runtime at least this often, changes or not


class ReportObserver:
    """Which reports a tick takes in: every one, or only the changes (see the module docstring).

    Orphans that could not be forgotten yet (`keep`) are handed in again at the next tick: a
    runtime that reports only changes would not repeat them."""

    def __init__(self, full_every_s: int = FULL_REPORT_EVERY_S) -> None:
        self.full_every_s = full_every_s
        self._cursor: int | None = None
        self._runtime: Runtime | None = None  # whose cursor it is
        self._full_at: Timestamp | None = None
        self._kept: dict[str, WorkloadReport] = {}

    def reports(self, runtime: Runtime, now: Timestamp) -> list[WorkloadReport]:
        """What the tick takes in: O(changes + kept) between full looks."""
        changes_since = getattr(runtime, "changes_since", None)
        if changes_since is None:
            return runtime.observe()
        due = self._full_at is None or now - self._full_at >= self.full_every_s
        if runtime is not self._runtime or due:
            self._cursor = None
        full = self._cursor is None
        reports, self._cursor = changes_since(self._cursor)
        self._runtime = runtime
        if full:
            self._full_at, self._kept = now, {}
            return list(reports)
        if not self._kept:
            return list(reports)
        merged = {**self._kept, **{r.allocation_id: r for r in reports}}
        return [merged[a] for a in sorted(merged)]

    def missed(self) -> None:
        """What was taken in was not acted on (a failed tick, a reload): look at everything."""
        self._cursor = None

    def keep(self, orphans: Sequence[WorkloadReport]) -> None:
        """Orphans not forgotten yet: handed in again at the next tick."""
        self._kept = {r.allocation_id: r for r in orphans}


def changing_reports(
    state: EngineState, reports: Sequence[WorkloadReport]
) -> list[tuple[str, LifecycleEvent]]:
    """The reports that change something, as lifecycle events, in allocation order. A workload
    reported running whose instance is not starting any more changes nothing (the local runtime
    reports every workload on every tick), so it never reaches the engine. Cost: O(reports)."""
    events: list[tuple[str, str, LifecycleEvent]] = []  # sorted after filtering: few are left
    for report in reports:
        inst = state.instances.get(report.instance_id)
        if inst is None or inst.rank_of(report.allocation_id) is None:
            continue
        if report.phase == "running" and inst.status is not InstanceStatus.STARTING:
            continue
        event = event_for(report, inst)
        if event is not None:
            events.append((report.allocation_id, inst.id, event))
    events.sort(key=lambda e: e[0])
    return [(instance_id, event) for _, instance_id, event in events]


def node_exits(
    state: EngineState,
    reports: Sequence[WorkloadReport],
    now: Timestamp,
    config: SchedulerConfig,
) -> EngineStep:
    """A node's placeholder that exited means its pods are gone: the drain can end.
    Cost: O(reports)."""
    step = EngineStep(state)
    if not state.nodes:
        return step
    ended = [r for r in reports if r.phase in ("exited", "start_failed")]
    for report in sorted(ended, key=lambda r: r.allocation_id):
        node = state.nodes.get(report.instance_id)
        if node is not None and node.allocation_id == report.allocation_id:
            step = merged(step, cluster_engine.node_exited(step.state, node.id, now, config))
    return step


def held(state: EngineState, report: WorkloadReport) -> bool:
    """Whether the reported workload is an allocation some live instance or node holds."""
    inst = state.instances.get(report.instance_id)
    if inst is not None:
        return inst.rank_of(report.allocation_id) is not None  # any member of a gang
    node = state.nodes.get(report.instance_id)
    return node is not None and node.allocation_id == report.allocation_id


def merged(first: EngineStep, then: EngineStep) -> EngineStep:
    """Two steps taken one after the other, as one: the later state, both effects in order,
    what either touched."""
    return EngineStep(
        then.state, (*first.effects, *then.effects), then.wake_at, first.touched | then.touched
    )


def event_for(report: WorkloadReport, inst: InstanceState | None = None) -> LifecycleEvent | None:
    """The lifecycle event a report means; for a gang's member, it names the member."""
    member = "" if inst is None or not inst.members else report.allocation_id
    match report.phase:
        case "running":
            return WorkloadStarted()
        case "exited":
            return WorkloadExited(report.exit_code, member)
        case "start_failed":
            return StartFailed(report.reason or "the workload could not start", member)
    return None
