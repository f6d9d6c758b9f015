"""A workload pod's status as the runtime's report: pure mapping, no I/O."""

from __future__ import annotations

from dataclasses import replace as _replace
from typing import Any, Final

from lowcostgpu.adapters.kubernetes.objects import ALLOCATION_ID, CONTAINER, INSTANCE_ID
from lowcostgpu.ports.runtime import WorkloadReport

# The container never ran: the image or the command is wrong. The kubelet says so in a
# terminated state (containerd's StartError) or keeps the container waiting with these reasons.
START_ERRORS: Final = frozenset({"StartError", "ContainerCannotRun"})
WAITING_FAILURES: Final = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
    }
)
# A pod marked for deletion whose node never reported the end (the node is gone): after its
# deletion time plus this much, the run counts as killed.
LOST_AFTER_S: Final = 60
KILLED: Final = 137


def report_of_pod(pod: Any, now: float) -> WorkloadReport | None:
    """What is true of the pod's run now; None for a pod that is not one of our workloads."""
    annotations = pod.metadata.annotations or {}
    if ALLOCATION_ID not in annotations:
        return None
    base = WorkloadReport(annotations[ALLOCATION_ID], annotations.get(INSTANCE_ID, ""), "starting")
    state = _container_state(pod)
    if state is not None and state.terminated is not None:
        return _terminated(base, state.terminated)
    if state is not None and state.waiting is not None and state.waiting.reason in WAITING_FAILURES:
        why = f"{state.waiting.reason}: {state.waiting.message or 'the container cannot start'}"
        return _replace(base, phase="start_failed", reason=why)
    phase = pod.status.phase if pod.status is not None else None
    if phase in ("Succeeded", "Failed"):  # no container status: it never ran
        why = f"{pod.status.reason or phase}: {pod.status.message or 'the pod did not run'}"
        return _replace(base, phase="start_failed", reason=why)
    if _lost(pod, now):
        why = "the pod was deleted and its node never reported the end of the run"
        if state is not None and state.running is not None:
            return _replace(base, phase="exited", exit_code=KILLED, reason=why, at=int(now))
        return _replace(base, phase="start_failed", reason=why)
    if state is not None and state.running is not None:
        return _replace(base, phase="running", at=_seconds(state.running.started_at))
    return base


def _container_state(pod: Any) -> Any | None:
    statuses = (pod.status.container_statuses if pod.status is not None else None) or []
    return next((s.state for s in statuses if s.name == CONTAINER), None)


def _terminated(base: WorkloadReport, terminated: Any) -> WorkloadReport:
    if terminated.reason in START_ERRORS:
        why = f"{terminated.reason}: {terminated.message or 'the container could not start'}"
        return _replace(base, phase="start_failed", reason=why)
    return _replace(
        base,
        phase="exited",
        exit_code=int(terminated.exit_code),
        reason=terminated.reason or "",
        at=_seconds(terminated.finished_at),
    )


def _lost(pod: Any, now: float) -> bool:
    deleted = pod.metadata.deletion_timestamp
    return deleted is not None and now > deleted.timestamp() + LOST_AFTER_S


def _seconds(at: Any) -> int | None:
    return int(at.timestamp()) if at is not None else None
