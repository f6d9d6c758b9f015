"""The fleet's host Nodes as the node provider reads and writes them: read, list, patch.

Every role change of a host (`node_roles`) is a read-modify-write of its Node: read it, check
that the change is still for the Node as it is now (a late replay must not touch the host's
next role), and patch it with its resourceVersion, redoing the whole on a 409. That discipline
and the errors that say what to check (a host that is no Node) are here, once, for every
effect of the provider (`nodes.KubernetesNodes`); so is the rule that a cluster node is a whole
Node. Plain functions, handed the `Kube` they speak to: they hold no state.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from lowcostgpu.adapters.kubernetes.client import Kube
from lowcostgpu.adapters.kubernetes.names import KubeNames
from lowcostgpu.adapters.kubernetes.node_roles import has_node, role_patch
from lowcostgpu.adapters.kubernetes.objects import gpus_of_node
from lowcostgpu.domain.errors import InvalidRequest, NotFound


def patch_host(
    kube: Kube,
    host: str,
    applies: Callable[[Any], Any | None],
    change: Callable[[Any], dict[str, Any] | None],
    *,
    what: str,
) -> Any | None:
    """Read-modify-write of the host Node with its resourceVersion (a 409 is read again and
    redone). `applies(node)` None: this change is not for the Node as it is now (a replay);
    `change(node)` None: nothing to change. Returns the Node (None: not applied)."""

    def attempt() -> Any | None:
        node = read_host(kube, host)
        if applies(node) is None:
            return None
        body = change(node)
        if body is not None:
            return kube.call(
                kube.core.patch_node,
                host,
                role_patch(node, body),
                _content_type="application/merge-patch+json",
                what=what,
            )
        return node

    return kube.retry_conflicts(attempt, what=what)


def carries(kube: Kube, names: KubeNames, host: str, node_id: str) -> bool:
    try:
        return has_node(read_host(kube, host), names, node_id)
    except NotFound:
        return False


def read_host(kube: Kube, host: str) -> Any:
    try:
        return kube.call(kube.core.read_node, host, what=f"reading node {host}")
    except NotFound:
        raise NotFound(
            f"host {host} of the fleet is no Node of the Kubernetes cluster at {kube.server}",
            hint="a host's kubelet registers its Node: check it runs (`kubectl get nodes`), "
            "and that the fleet's host ids are Node names",
        ) from None


def list_nodes(kube: Kube, labels: Mapping[str, str]) -> list[Any]:
    found: Any = kube.call(
        kube.core.list_node,
        label_selector=",".join(f"{k}={v}" for k, v in labels.items()),
        what="listing our nodes",
    )
    return list(found.items)


def check_whole_host(node_id: str, node: Any, gpus: int) -> None:
    """A cluster node on Kubernetes is a whole Node: kube-scheduler places pods on Nodes, so a
    node cut from part of a host would share its GPUs with whatever holds the rest."""
    have = gpus_of_node(node)
    if gpus != have:
        raise InvalidRequest(
            f"node {node_id} would take {gpus} of the {have} GPUs of Node "
            f"{node.metadata.name}: on Kubernetes a cluster node is a whole host",
            hint=f"make the cluster's gpus_per_node {have}, the GPUs of each host of this pool "
            "(delete this cluster and create it again)",
        )
