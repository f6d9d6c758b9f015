"""A control plane wired to a real kube-apiserver: the Kubernetes runtime and node provider."""

from __future__ import annotations

from typing import Any

from apiserver import register_host

from lowcostgpu.adapters.clock import RandomIds, SystemClock
from lowcostgpu.adapters.files import load_catalog
from lowcostgpu.adapters.kubernetes import (
    Kube,
    KubernetesNodes,
    KubernetesRuntime,
    KubernetesVolumes,
)
from lowcostgpu.adapters.kubernetes.names import DEFAULT_NAMES, KubeNames
from lowcostgpu.adapters.store.memory import MemoryStore
from lowcostgpu.app.clusters import ClusterRequest
from lowcostgpu.app.launch import LaunchRequest
from lowcostgpu.app.plane import ControlPlane, PlaneConfig
from lowcostgpu.bootstrap.wiring import Wired, wire
from lowcostgpu.core.scheduler import SchedulerConfig
from lowcostgpu.domain.capacity import Host, PoolKey

POOL = PoolKey("eu-west", "a100-sxm4")
GPU_LIMIT = {"limits": {"nvidia.com/gpu": "1"}}


class K8sWorld:
    """A plane on a memory store whose runtime and nodes are the API server's pods and Nodes.
    Its hosts (8 GPUs each) are Nodes named after the namespace, so tests do not collide: the
    first is `host`; cluster nodes are whole hosts."""

    def __init__(
        self,
        kube: Kube,
        namespace: str,
        gpus: int = 8,
        hosts: int = 1,
        names: KubeNames = DEFAULT_NAMES,
        register: bool = True,
    ) -> None:
        self.kube, self.namespace, self.names = kube, namespace, names
        self.hosts = [f"gpu-{namespace}"] + [f"gpu-{namespace}-{n}" for n in range(2, hosts + 1)]
        self.host = self.hosts[0]
        if register:  # else: the test brings real kubelets (hollow nodes) of these names
            for host in self.hosts:
                register_host(kube.core, host, gpus)
        self.store = MemoryStore()
        self.nodes = KubernetesNodes(
            kube, self.store, names=names, plane=namespace, hosts=self.hosts
        )
        self.runtime = KubernetesRuntime(kube, namespace=namespace, nodes=self.nodes)
        self.wired: Wired = wire(
            store=self.store,
            runtime=self.runtime,
            volumes=KubernetesVolumes(kube, namespace=namespace),
            nodes=self.nodes,
            clock=SystemClock(),
            ids=RandomIds(),
            hosts=[Host(h, POOL, gpus) for h in self.hosts],
            catalog=load_catalog(),
            secret=b"0123456789abcdef0123456789abcdef",
            metadata_url="http://127.0.0.1:9/v1/metadata",
            config=PlaneConfig(scheduler=SchedulerConfig(min_runtime_s=0), whole_host_nodes=True),
        )

    @property
    def plane(self) -> ControlPlane:
        return self.wired.plane

    def cluster(self, desired: int = 8, grace_s: int = 4, standard: int = 1) -> str:
        request = ClusterRequest("acme", "a100-sxm4", 8, standard, desired, grace_period_s=grace_s)
        return self.plane.clusters.create_cluster(request).cluster.id

    def on_demand(self, gpus: int = 8) -> str:
        request = LaunchRequest(
            "acme", "a100-sxm4", "on-demand", gpus, command=("serve",), grace_period_s=2
        )
        return self.plane.launch(request).state.id

    def node_names(self, cluster_id: str, compute_class: str | None = None) -> list[str]:
        """The hosts (Node names) of the cluster's placed nodes, as the plane sees them."""
        view = self.plane.clusters.get_cluster(cluster_id)
        return [
            n.host_id
            for n in view.nodes
            if n.host_id is not None
            and n.status.value in ("ready", "cordoned")
            and (compute_class is None or n.capacity_class.compute_class_label == compute_class)
        ]

    def cluster_of(self, host: str) -> str | None:
        """The cluster a host Node is in now, as Kubernetes sees it (None: in the pool)."""
        node = self.node(host)
        return None if node is None else (node.metadata.labels or {}).get(self.names.cluster_label)

    def user_pod(self, node: str, name: str, grace_s: int, **labels: str) -> None:
        """A user's pod bound to `node` (no scheduler runs), tolerating preemption."""
        body = user_pod_body(self.names, node, name, grace_s, labels or {"app": "train"})
        self.kube.core.create_namespaced_pod(self.namespace, body)

    def pods(self) -> dict[str, Any]:
        return {
            p.metadata.name: p for p in self.kube.core.list_namespaced_pod(self.namespace).items
        }

    def node(self, name: str) -> Any | None:
        found = self.kube.core.list_node(field_selector=f"metadata.name={name}").items
        return found[0] if found else None


def user_pod_body(
    names: KubeNames, node: str, name: str, grace_s: int, labels: dict[str, str]
) -> dict[str, Any]:
    """A user's pod bound to `node` (no scheduler runs), tolerating preemption, one GPU."""
    taint = names.taint
    toleration = {"key": taint.key, "operator": "Exists", "effect": taint.effect}
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": grace_s,
            "tolerations": [toleration],
            "containers": [{"name": "c", "image": "trainer", "resources": GPU_LIMIT}],
        },
    }


def create_pdb(kube: Kube, namespace: str, name: str, app: str, **spec: int) -> None:
    """A PodDisruptionBudget over the pods labelled `app=<app>` (`spec`: minAvailable=…), in the
    policy version the server takes (v1beta1 on 1.20)."""
    version = kube.eviction_version()
    body = {
        "apiVersion": version,
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name},
        "spec": {**spec, "selector": {"matchLabels": {"app": app}}},
    }
    path = f"/apis/{version}/namespaces/{namespace}/poddisruptionbudgets"
    kube.raw("POST", path, body, what="a PDB")
