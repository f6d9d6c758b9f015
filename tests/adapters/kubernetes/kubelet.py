"""A fake kubelet, as kwok plays one: it gives pods the statuses a kubelet would.

It runs in a thread and polls the API server. A pod bound to a node turns Running (or fails to
start with containerd's message when its command is "missing"). A pod marked for deletion has
got its SIGTERM; when its grace is over (its deletionTimestamp) the container ends with 137 and
the kubelet makes its final delete (grace 0). `finish` ends a container with an exit code, as the
workload itself would. Everything it did is in `log` (pod name, what, monotonic time).
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

MISSING_COMMAND = "/nonexistent/lowcostgpu-no-such-command"
POLL_S = 0.05


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class FakeKubelet:
    def __init__(self, api: client.ApiClient, *, exit_on_sigterm: bool = False) -> None:
        self.core = client.CoreV1Api(api)
        self.exit_on_sigterm = exit_on_sigterm  # True: workloads end at once on SIGTERM (0)
        self.log: list[tuple[str, str, float]] = []
        self.sigterm: set[str] = set()
        self._sigterm_at: dict[str, float] = {}
        self._finished: set[str] = set()  # "namespace/name" whose final delete was made
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fake-kubelet", daemon=True)
        self.errors: list[str] = []

    def start(self) -> FakeKubelet:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def finish(self, namespace: str, name: str, exit_code: int) -> None:
        """The container exits with `exit_code` (the workload decided to)."""
        pod = self.core.read_namespaced_pod(name, namespace)
        self._terminate(pod, exit_code, "Completed" if exit_code == 0 else "Error")

    # -- the loop ------------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.wait(POLL_S):
            try:
                for pod in self.core.list_pod_for_all_namespaces(_request_timeout=5).items:
                    self._step(pod)
            except ApiException as exc:
                if exc.status not in (404, 409):
                    self.errors.append(f"{exc.status} {exc.reason}")
            except Exception as exc:  # the API server may be down (outage tests): poll again
                self.errors.append(repr(exc))

    def _step(self, pod: Any) -> None:
        if not pod.spec.node_name:
            return
        key = f"{pod.metadata.namespace}/{pod.metadata.name}"
        state = self._state(pod)
        if pod.metadata.deletion_timestamp is None:
            if state is None:
                self._begin(pod)
            return
        if state is None:  # deleted before it started: what a kubelet reports for it
            self._terminate(pod, 137, "ContainerStatusUnknown")
            return
        if state.terminated is None:
            if key not in self.sigterm:  # the grace runs from here, as in a kubelet
                self.sigterm.add(key)
                self._sigterm_at[key] = time.monotonic()
                self.log.append((pod.metadata.name, "SIGTERM", time.monotonic()))
            grace = pod.metadata.deletion_grace_period_seconds or 0
            due = time.monotonic() >= self._sigterm_at[key] + grace
            if self.exit_on_sigterm or due or pod.metadata.deletion_grace_period_seconds == 0:
                code = 0 if self.exit_on_sigterm and not due else 137
                self._terminate(pod, code, "Completed" if code == 0 else "Error")
            return
        if key not in self._finished:  # ended (or never started): the kubelet's final delete
            self._finished.add(key)
            self.core.delete_namespaced_pod(
                pod.metadata.name, pod.metadata.namespace, grace_period_seconds=0
            )
            self.log.append((pod.metadata.name, "deleted", time.monotonic()))

    def _begin(self, pod: Any) -> None:
        container = pod.spec.containers[0]
        if (container.command or [""])[0] == MISSING_COMMAND:
            message = (
                "failed to create containerd task: OCI runtime create failed: exec: "
                f'"{MISSING_COMMAND}": stat {MISSING_COMMAND}: no such file or directory: unknown'
            )
            state = {"terminated": {"exitCode": 128, "reason": "StartError", "message": message,
                                    "startedAt": _now(), "finishedAt": _now()}}  # fmt: skip
            self._status(pod, "Failed", state, ready=False)
            self.log.append((pod.metadata.name, "start-failed", time.monotonic()))
            return
        self._status(pod, "Running", {"running": {"startedAt": _now()}}, ready=True)
        self.log.append((pod.metadata.name, "running", time.monotonic()))

    def _terminate(self, pod: Any, exit_code: int, reason: str) -> None:
        started = self._state(pod)
        began = started.running.started_at if started is not None and started.running else None
        start = began.strftime("%Y-%m-%dT%H:%M:%SZ") if began else _now()
        terminated = {
            "exitCode": exit_code,
            "reason": reason,
            "finishedAt": _now(),
            "startedAt": start,
        }
        phase = "Succeeded" if exit_code == 0 else "Failed"
        self._status(pod, phase, {"running": None, "terminated": terminated}, ready=False)
        self.log.append((pod.metadata.name, f"exited {exit_code}", time.monotonic()))

    def _status(self, pod: Any, phase: str, state: dict[str, Any], *, ready: bool) -> None:
        container = pod.spec.containers[0]
        status = {
            "name": container.name, "image": container.image, "imageID": "", "ready": ready,
            "restartCount": 0, "state": state,
        }  # fmt: skip
        conditions = [{"type": "Ready", "status": "True" if ready else "False"}]
        body = {"status": {"phase": phase, "conditions": conditions, "containerStatuses": [status]}}
        self.core.patch_namespaced_pod_status(pod.metadata.name, pod.metadata.namespace, body)

    @staticmethod
    def _state(pod: Any) -> Any | None:
        statuses = (pod.status.container_statuses if pod.status else None) or []
        return statuses[0].state if statuses else None
