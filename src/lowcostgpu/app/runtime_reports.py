"""What the runtime reported, as the engine's input: only reports that change something.

The local runtime reports every workload at every poll (level-triggered, so nothing is lost in a
crash). Most of those reports repeat what the live state already says; they are dropped here
without touching the engine, so that a tick costs what changed, not what runs.
"""

from __future__ import annotations

from collections.abc import Sequence

from lowcostgpu.core import cluster_engine
from lowcostgpu.core.engine import EngineState, EngineStep
from lowcostgpu.core.lifecycle import LifecycleEvent, StartFailed, WorkloadExited, WorkloadStarted
from lowcostgpu.core.scheduler import SchedulerConfig
from lowcostgpu.domain.capacity import Timestamp
from lowcostgpu.domain.status import InstanceStatus
from lowcostgpu.ports.runtime import WorkloadReport


def changing_reports(
    state: EngineState, reports: Sequence[WorkloadReport]
) -> list[tuple[str, LifecycleEvent]]:
    """The reports that change something, as lifecycle events, in allocation order. A workload
    reported running whose instance is not starting any more changes nothing (the local runtime
    reports every workload on every tick), so it never reaches the engine. Cost: O(reports)."""
    events: list[tuple[str, str, LifecycleEvent]] = []  # sorted after filtering: few are left
    for report in reports:
        inst = state.instances.get(report.instance_id)
        if inst is None or inst.allocation_id != report.allocation_id:
            continue
        if report.phase == "running" and inst.status is not InstanceStatus.STARTING:
            continue
        event = event_for(report)
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
    subject = state.instances.get(report.instance_id) or state.nodes.get(report.instance_id)
    return subject is not None and subject.allocation_id == report.allocation_id


def merged(first: EngineStep, then: EngineStep) -> EngineStep:
    """Two steps taken one after the other, as one: the later state, both effects in order,
    what either touched."""
    return EngineStep(
        then.state, (*first.effects, *then.effects), then.wake_at, first.touched | then.touched
    )


def event_for(report: WorkloadReport) -> LifecycleEvent | None:
    match report.phase:
        case "running":
            return WorkloadStarted()
        case "exited":
            return WorkloadExited(report.exit_code)
        case "start_failed":
            return StartFailed(report.reason or "the workload could not start")
    return None
