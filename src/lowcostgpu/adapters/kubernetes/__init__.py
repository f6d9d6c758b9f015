"""Kubernetes adapters: the runtime (pods), volumes (claims) and the node provider (Nodes)."""

from lowcostgpu.adapters.kubernetes.client import Kube
from lowcostgpu.adapters.kubernetes.nodes import KubernetesNodes
from lowcostgpu.adapters.kubernetes.runtime import KubernetesRuntime
from lowcostgpu.adapters.kubernetes.volumes import KubernetesVolumes

__all__ = ["Kube", "KubernetesNodes", "KubernetesRuntime", "KubernetesVolumes"]
