"""Drive instances through real steps to a given status (no hand-built states)."""

from __future__ import annotations

from collections.abc import Iterable

from lowcostgpu.core.effects import Effect, EmitEvent
from lowcostgpu.core.lifecycle import (
    DeleteRequested,
    InstanceState,
    LifecycleEvent,
    Placed,
    Reclaimed,
    Step,
    StopRequested,
    WorkloadExited,
    WorkloadStarted,
    new_instance,
    step,
)
from lowcostgpu.domain.capacity import CapacityClass, PoolKey
from lowcostgpu.domain.events import Reason
from lowcostgpu.domain.status import InstanceStatus

T0 = 1_700_000_000
POOL = PoolKey("eu-west", "a100-sxm4")


def instance(
    *,
    capacity_class: CapacityClass = CapacityClass.INTERRUPTIBLE,
    auto_requeue: bool = True,
    grace_period_s: int = 300,
) -> InstanceState:
    built = InstanceState(
        id="inst-1",
        account_id="acct-1",
        pool=POOL,
        gpus=2,
        capacity_class=capacity_class,
        auto_requeue=auto_requeue,
        grace_period_s=grace_period_s,
    )
    return new_instance(built, T0).state


def run(state: InstanceState, events: Iterable[tuple[LifecycleEvent, int]]) -> InstanceState:
    for event, at in events:
        state = step(state, event, at).state
    return state


def placed(n: int = 1) -> Placed:
    return Placed(allocation_id=f"alloc-{n}", host_id="host-a", gpu_indices=frozenset({0, 1}))


_PATHS: dict[InstanceStatus, list[tuple[LifecycleEvent, int]]] = {
    InstanceStatus.QUEUED: [],
    InstanceStatus.STARTING: [(placed(), T0 + 10)],
    InstanceStatus.RUNNING: [(placed(), T0 + 10), (WorkloadStarted(), T0 + 20)],
    InstanceStatus.INTERRUPTING: [
        (placed(), T0 + 10),
        (WorkloadStarted(), T0 + 20),
        (Reclaimed("od-9", 100, "least work lost"), T0 + 100),
    ],
    InstanceStatus.STOPPING: [
        (placed(), T0 + 10),
        (WorkloadStarted(), T0 + 20),
        (StopRequested(), T0 + 100),
    ],
    InstanceStatus.SUCCEEDED: [
        (placed(), T0 + 10),
        (WorkloadStarted(), T0 + 20),
        (WorkloadExited(0), T0 + 100),
    ],
    InstanceStatus.FAILED: [
        (placed(), T0 + 10),
        (WorkloadStarted(), T0 + 20),
        (WorkloadExited(3), T0 + 100),
    ],
}
_PATHS[InstanceStatus.INTERRUPTED] = [
    *_PATHS[InstanceStatus.INTERRUPTING],
    (WorkloadExited(143), T0 + 130),
]
_PATHS[InstanceStatus.STOPPED] = [*_PATHS[InstanceStatus.STOPPING], (WorkloadExited(0), T0 + 130)]
_PATHS[InstanceStatus.DELETED] = [*_PATHS[InstanceStatus.STOPPED], (DeleteRequested(), T0 + 140)]


def at_status(status: InstanceStatus, **kwargs: object) -> InstanceState:
    """An instance in `status`, reached through real steps (auto-requeue off for INTERRUPTED)."""
    if status is InstanceStatus.INTERRUPTED:
        kwargs.setdefault("auto_requeue", False)
    state = run(instance(**kwargs), _PATHS[status])  # type: ignore[arg-type]
    assert state.status is status
    return state


def reasons(result: Step[InstanceState] | Iterable[Effect]) -> list[Reason]:
    effects = result.effects if isinstance(result, Step) else result
    return [e.reason for e in effects if isinstance(e, EmitEvent)]


def of_type(result: Step[InstanceState], kind: type) -> list[Effect]:
    return [e for e in result.effects if isinstance(e, kind)]
