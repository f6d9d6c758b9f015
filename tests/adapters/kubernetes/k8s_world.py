"""A control plane wired to a real kube-apiserver: the Kubernetes runtime and node provider."""

from __future__ import annotations

from typing import Any

from lowcostgpu.adapters.clock import RandomIds, SystemClock
from lowcostgpu.adapters.files import load_catalog
from lowcostgpu.adapters.kubernetes import (
    Kube,
    KubernetesNodes,
    KubernetesRuntime,
    KubernetesVolumes,
)
from lowcostgpu.adapters.kubernetes.objects import node_name
from lowcostgpu.adapters.store.memory import MemoryStore
from lowcostgpu.app.clusters import ClusterRequest
from lowcostgpu.app.launch import LaunchRequest
from lowcostgpu.app.plane import ControlPlane, PlaneConfig
from lowcostgpu.bootstrap.wiring import Wired, wire
from lowcostgpu.core.nodes import PREEMPTIBLE_TAINT
from lowcostgpu.core.scheduler import SchedulerConfig
from lowcostgpu.domain.capacity import Host, PoolKey

POOL = PoolKey("eu-west", "a100-sxm4")
GPU_LIMIT = {"limits": {"nvidia.com/gpu": "1"}}


class K8sWorld:
    """A plane on a memory store whose runtime and nodes are the API server's pods and Nodes.
    Its one host (8 GPUs) is a Node named after the namespace, so tests do not collide."""

    def __init__(self, kube: Kube, namespace: str, gpus: int = 8) -> None:
        self.kube, self.namespace = kube, namespace
        self.host = f"gpu-{namespace}"
        kube.core.create_node({"metadata": {"name": self.host}})
        self.store = MemoryStore()
        self.nodes = KubernetesNodes(kube, self.store, plane=namespace)
        self.runtime = KubernetesRuntime(kube, namespace=namespace, nodes=self.nodes)
        self.wired: Wired = wire(
            store=self.store,
            runtime=self.runtime,
            volumes=KubernetesVolumes(kube, namespace=namespace),
            nodes=self.nodes,
            clock=SystemClock(),
            ids=RandomIds(),
            hosts=[Host(self.host, POOL, gpus)],
            catalog=load_catalog(),
            secret=b"0123456789abcdef0123456789abcdef",
            metadata_url="http://127.0.0.1:9/v1/metadata",
            config=PlaneConfig(scheduler=SchedulerConfig(min_runtime_s=0)),
        )

    @property
    def plane(self) -> ControlPlane:
        return self.wired.plane

    def cluster(self, desired: int = 4, grace_s: int = 4) -> str:
        request = ClusterRequest("acme", "a100-sxm4", 4, 1, desired, grace_period_s=grace_s)
        return self.plane.clusters.create_cluster(request).cluster.id

    def on_demand(self, gpus: int = 4) -> str:
        request = LaunchRequest(
            "acme", "a100-sxm4", "on-demand", gpus, command=("serve",), grace_period_s=2
        )
        return self.plane.launch(request).state.id

    def node_names(self, cluster_id: str, compute_class: str | None = None) -> list[str]:
        view = self.plane.clusters.get_cluster(cluster_id)
        return [
            node_name(n.id)
            for n in view.nodes
            if compute_class is None or n.capacity_class.compute_class_label == compute_class
        ]

    def user_pod(self, node: str, name: str, grace_s: int, **labels: str) -> None:
        """A user's pod bound to `node` (no scheduler runs), tolerating preemption."""
        taint = PREEMPTIBLE_TAINT
        toleration = {"key": taint.key, "operator": "Exists", "effect": taint.effect}
        body = {
            "metadata": {"name": name, "labels": labels or {"app": "train"}},
            "spec": {
                "nodeName": node,
                "terminationGracePeriodSeconds": grace_s,
                "tolerations": [toleration],
                "containers": [
                    {
                        "name": "c",
                        "image": "trainer",
                        "resources": {"limits": {"nvidia.com/gpu": "1"}},
                    }
                ],
            },
        }
        self.kube.core.create_namespaced_pod(self.namespace, body)

    def pods(self) -> dict[str, Any]:
        return {
            p.metadata.name: p for p in self.kube.core.list_namespaced_pod(self.namespace).items
        }

    def node(self, name: str) -> Any | None:
        found = self.kube.core.list_node(field_selector=f"metadata.name={name}").items
        return found[0] if found else None
