"""The Kubernetes runtime: an instance's run is a Pod; its interruption an eviction.

- `start`: a Secret with the workload's environment (it holds the instance token), then a Pod
  bound to the allocation's host (`spec.nodeName`: the control plane is the scheduler), asking
  for `nvidia.com/gpu`, mounting the instance's PersistentVolumeClaim. A requeued run is a new
  Pod (a new allocation) on the same claim. A host is in one role at a time: the pod is made
  only once the host is no cluster's node any more and its kubelet has removed (or reported
  ended) the pods that held the GPUs before (a drain's evicted pods, a reclaimed run's): until
  then the start is
  `Unavailable` and the outbox tries again, so the pod never fails the kubelet's admission.
- `signal` (SIGTERM): an eviction with the pod's grace; the kubelet sends SIGTERM, and SIGKILL
  when the grace is over. `kill`: a delete with grace 0.
- `observe`: one LIST of our pods per call, mapped to reports (level-triggered). A finalizer
  (`lowcostgpu.io/exit-report`) keeps an ended pod, and so its exit code, in the API server until
  `forget`: a control plane that restarts finds every exit it has not taken in yet.
- node allocations (cluster nodes, see `nodes.py`) are handed to the node provider.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any, Literal

from lowcostgpu.adapters.kubernetes import drain
from lowcostgpu.adapters.kubernetes.client import Kube, already_exists
from lowcostgpu.adapters.kubernetes.informer import PodCache
from lowcostgpu.adapters.kubernetes.nodes import KubernetesNodes
from lowcostgpu.adapters.kubernetes.objects import (
    EXIT_FINALIZER,
    GANG_LABEL,
    RANK_LABEL,
    check_allocation_id,
    env_secret,
    gang_service,
    gang_service_name,
    gpus_of_node,
    gpus_of_pod,
    pod_ended,
    pod_name,
    selector,
    workload_pod,
)
from lowcostgpu.adapters.kubernetes.pods import report_of_pod
from lowcostgpu.domain.errors import Conflict, InvalidRequest, NotFound, Unavailable
from lowcostgpu.ports.runtime import WorkloadReport, WorkloadStart, check_command

log = logging.getLogger(__name__)
DEFAULT_IMAGE = "python:3.11-slim"


class KubernetesRuntime:
    """`ports.runtime.Runtime` over one namespace of one API server."""

    def __init__(
        self,
        kube: Kube,
        *,
        namespace: str = "default",
        image: str = DEFAULT_IMAGE,
        nodes: KubernetesNodes | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.kube = kube
        self.namespace = namespace
        self.image = image
        self.nodes = nodes
        self.clock = clock
        self._cache: PodCache | None = None

    def watch(self, on_change: Callable[[], None] | None = None) -> None:
        """Serve `observe` from a watch-fed cache (see `informer.py`); `on_change` is called
        when a workload pod changes (the loop's wake-up)."""
        if self._cache is None:
            self._cache = PodCache(self.kube, self.namespace, selector("workload"), on_change)
            self._cache.start()

    def close(self) -> None:
        if self._cache is not None:
            self._cache.stop()
            self._cache = None

    def gang_address(self, gang_id: str, master_host_id: str) -> str:
        """A gang's rank 0 as its members reach it: the DNS name of its headless Service."""
        return f"{gang_service_name(gang_id)}.{self.namespace}.svc"

    def start(self, start: WorkloadStart) -> None:
        check_allocation_id(start.allocation_id)
        check_command(start)
        self._check_host_free(start)
        if start.nodes > 1 and start.rank == 0:  # before the pod: its members look it up
            service = gang_service(start)
            name = service["metadata"]["name"]
            self._create(self.kube.core.create_namespaced_service, service, f"service {name}")
        secret = env_secret(start)
        self._create(self.kube.core.create_namespaced_secret, secret, "its environment")
        pod = workload_pod(start, image=self.image, env_secret=secret["metadata"]["name"])
        self._create(self.kube.core.create_namespaced_pod, pod, f"pod {pod['metadata']['name']}")

    def signal(self, allocation_id: str, signal: Literal["SIGTERM"]) -> None:
        if signal != "SIGTERM":
            raise InvalidRequest(f"signal {signal!r} is not supported", hint="send 'SIGTERM'")
        pod = self._pod(allocation_id)
        if pod is None:
            if self.nodes is not None and (node := self.nodes.node_of(allocation_id)) is not None:
                self.nodes.signal(node)
            return
        if pod_ended(pod) or pod.metadata.deletion_timestamp is not None:
            return
        grace = drain.grace_within(pod, 300)
        if drain.evict(self.kube, pod, grace) == "blocked":  # our own pod: the notice wins
            drain.delete_pod(self.kube, pod, grace)

    def kill(self, allocation_id: str) -> None:
        pod = self._pod(allocation_id)
        if pod is None:
            if self.nodes is not None and (node := self.nodes.node_of(allocation_id)) is not None:
                self.nodes.kill(node)
            return
        if not pod_ended(pod) and pod.metadata.deletion_grace_period_seconds != 0:
            drain.delete_pod(self.kube, pod, 0)

    def observe(self) -> list[WorkloadReport]:
        pods = self._cache.pods() if self._cache is not None else None
        if pods is None:  # no cache, or not in sync: list
            found = self.kube.call(
                self.kube.core.list_namespaced_pod,
                self.namespace,
                label_selector=selector("workload"),
                what=f"listing the workload pods in namespace {self.namespace}",
            )
            pods = found.items
        now = self.clock()
        reports = [r for pod in pods if (r := report_of_pod(pod, now)) is not None]
        if self.nodes is not None:
            reports += self.nodes.reports()
        return sorted(reports, key=lambda r: r.allocation_id)

    def forget(self, allocation_id: str) -> None:
        check_allocation_id(allocation_id)
        pod = self._pod(allocation_id)
        if pod is not None:
            report = report_of_pod(pod, self.clock())
            if report is not None and report.phase in ("starting", "running"):
                raise Conflict(
                    f"workload {allocation_id} is still {report.phase}; it cannot be forgotten yet",
                    hint="signal or kill it, and forget it once observe() reports it exited",
                )
            self.kube.retry_conflicts(lambda: self._release(allocation_id), what="forget")
            if self._cache is not None:
                self._cache.forget(pod.metadata.name)
            labels = pod.metadata.labels or {}
            if GANG_LABEL in labels and labels.get(RANK_LABEL) == "0":  # its run's Service
                self._delete(
                    self.kube.core.delete_namespaced_service, gang_service_name(allocation_id)
                )
        self._delete(self.kube.core.delete_namespaced_secret, pod_name(allocation_id))

    def holds(self, allocation_id: str) -> bool:
        """Whether this cluster holds the allocation: its pod, or a host Node as a cluster node
        (`regions.RegionalRuntime` asks, after a restart). Cost: one or two reads."""
        if self._pod(allocation_id) is not None:
            return True
        return self.nodes is not None and self.nodes.node_of(allocation_id) is not None

    def logs(self, allocation_id: str, tail_bytes: int = 65536) -> str:
        check_allocation_id(allocation_id)
        name = pod_name(allocation_id)
        if self._pod(allocation_id) is None:
            raise NotFound(
                f"the pod of workload {allocation_id} is gone, and its log with it",
                hint="on Kubernetes a run's log lives in its pod, deleted once the run has "
                "ended: only the latest run's log is kept there, while its pod exists "
                "(a cluster log collector can keep the others)",
            )
        try:
            text = self.kube.call(
                self.kube.core.read_namespaced_pod_log,
                name,
                self.namespace,
                what=f"the log of pod {name}",
            )
        except (Unavailable, InvalidRequest) as exc:
            raise Unavailable(
                f"the log of workload {allocation_id} cannot be read now: {exc.message}",
                hint="the kubelet of its node serves logs; check that the node is up",
            ) from None
        return str(text)[-max(0, tail_bytes) :] if tail_bytes else ""

    # -- internals -----------------------------------------------------------------------------

    def _check_host_free(self, start: WorkloadStart) -> None:
        """`NotFound` if the host is no Node; `Unavailable` while it is still a cluster's node
        or its kubelet still runs pods holding GPUs this run needs (a retry comes later).

        Cost: one read of the Node and one LIST of the pods bound to it."""
        host = start.host_id
        try:
            node: Any = self.kube.call(self.kube.core.read_node, host, what=f"reading node {host}")
        except NotFound:
            raise NotFound(
                f"host {host} of the fleet is no node of the Kubernetes cluster at "
                f"{self.kube.server}",
                hint="name the fleet's hosts after the cluster's GPU nodes (`kubectl get nodes`)",
            ) from None
        if self.nodes is not None and self.nodes.names.cluster_label in (
            node.metadata.labels or {}
        ):
            raise Unavailable(
                f"host {host} is still a cluster's node: the run starts once it is back in the "
                "pool",
                hint="nothing to do: the start is tried again",
            )
        ours = pod_name(start.allocation_id)
        held = sum(
            gpus_of_pod(p)
            for p in drain.pods_on(self.kube, host)
            if p.metadata.name != ours and not pod_ended(p)
        )
        if held + len(start.gpu_indices) > gpus_of_node(node):
            raise Unavailable(
                f"host {host}: its kubelet has not yet removed the pods holding {held} of its "
                f"{gpus_of_node(node)} GPUs; the run starts once they are gone",
                hint="nothing to do: the start is tried again",
            )

    def _create(self, create: Callable[..., Any], body: dict[str, Any], what: str) -> None:
        try:
            self.kube.call(create, self.namespace, body, what=f"creating {what}")
        except Conflict as exc:
            if not already_exists(exc):  # started before: nothing to do
                raise

    def _delete(self, delete: Callable[..., Any], name: str) -> None:
        with contextlib.suppress(NotFound):
            self.kube.call(delete, name, self.namespace, what=f"deleting {name}")

    def _pod(self, allocation_id: str) -> Any | None:
        name = pod_name(allocation_id)
        try:
            return self.kube.call(
                self.kube.core.read_namespaced_pod, name, self.namespace, what=f"reading pod {name}"
            )
        except NotFound:
            return None

    def _release(self, allocation_id: str) -> None:
        """Drop our finalizer (with the pod's resourceVersion: a 409 is retried), then delete."""
        pod = self._pod(allocation_id)
        if pod is None:
            return
        finalizers = [f for f in pod.metadata.finalizers or [] if f != EXIT_FINALIZER]
        if finalizers != list(pod.metadata.finalizers or []):
            meta = {"finalizers": finalizers, "resourceVersion": pod.metadata.resource_version}
            self.kube.call(
                self.kube.core.patch_namespaced_pod,
                pod.metadata.name,
                self.namespace,
                {"metadata": meta},
                _content_type="application/merge-patch+json",  # replaces the list: a 409 if stale
                what=f"releasing pod {pod.metadata.name}",
            )
        if pod.metadata.deletion_timestamp is None:
            drain.delete_pod(self.kube, pod, 0)
