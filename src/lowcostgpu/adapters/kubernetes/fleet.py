"""The fleet of `--runtime kubernetes`, as a cluster sees it: the GPU Nodes its kubelets register.

A fleet host is a machine whose kubelet registered it as a Node; a run is a pod bound to it by
name (`spec.nodeName`) asking for `nvidia.com/gpu`. A fleet that disagrees with the cluster
would be pods that never start (a host that is no Node, more GPUs than the device plugin
offers) or GPUs that are never used. `check_fleet` refuses, at start, every disagreement of one
region's hosts with that region's cluster, naming each:

- a host that is no Node of the cluster: an error;
- a host whose GPU count differs from the Node's allocatable `nvidia.com/gpu`: an error;
- a host whose Node is labelled `<prefix>/fleet=<gpu type>` with another GPU type: an error (a
  Node without the label is taken as the fleet file says);
- a Node labelled `<prefix>/fleet` that the fleet leaves out: a warning (it only stays unused);
  so is a host whose Node is cordoned or not Ready (its work waits until it is back).

`fleet_from_kubernetes` builds a region's hosts from its labelled Nodes instead
(`--fleet-from-kubernetes`). lowcostgpu makes no Node itself (a cluster node is a fleet host in
another role, `nodes.py`); Nodes labelled `app.kubernetes.io/managed-by=lowcostgpu` (made by
versions before that) are never fleet hosts.

Cost: one LIST of the cluster's Nodes per region (`gpu_nodes`), O(Nodes); done once at start.
The checks are pure functions over `kubernetes.client.V1Node` objects.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lowcostgpu.adapters.kubernetes.client import Kube
from lowcostgpu.adapters.kubernetes.names import KubeNames
from lowcostgpu.adapters.kubernetes.objects import GPU_RESOURCE, MANAGED_BY, MANAGER, gpus_of_node
from lowcostgpu.domain.capacity import Host, PoolKey
from lowcostgpu.domain.catalog import Catalog
from lowcostgpu.domain.errors import ConfigError
from lowcostgpu.domain.fleet import HOST_NAME, REGION_NAME, listed


def gpu_nodes(kube: Kube) -> list[Any]:
    """The cluster's Nodes but the ones lowcostgpu made (one LIST call)."""
    found = kube.call(
        kube.core.list_node,
        label_selector=f"{MANAGED_BY}!={MANAGER}",
        what="listing the cluster's nodes",
    )
    return list(found.items)


def fleet_label(node: Any, names: KubeNames) -> str | None:
    return (node.metadata.labels or {}).get(names.fleet_label)


def check_fleet(
    hosts: Sequence[Host], nodes: Sequence[Any], names: KubeNames, region: str, where: str = ""
) -> list[str]:
    """Refuse hosts of `region` that disagree with its cluster's `nodes` (the module docstring
    says what is an error); the warnings. `where`: the cluster, for the messages."""
    by_name = {n.metadata.name: n for n in nodes}
    mine = [h for h in hosts if h.pool.region == region]
    problems: list[str] = []
    for host in mine:
        node = by_name.get(host.id)
        if node is None:
            problems.append(f"host {host.id} is no node of the cluster")
            continue
        gpus = gpus_of_node(node)
        if gpus != host.gpu_count:
            problems.append(
                f"host {host.id}: the fleet says {host.gpu_count} GPUs, the node has {gpus} "
                f"allocatable {GPU_RESOURCE}"
            )
        label = fleet_label(node, names)
        if label is not None and label != host.pool.gpu_type:
            problems.append(
                f"host {host.id}: the fleet says GPU type {host.pool.gpu_type}, the node's "
                f"label {names.fleet_label}={label}"
            )
    if problems:
        raise ConfigError(
            f"the fleet of region {region} disagrees with its Kubernetes cluster{where}: "
            f"{listed(problems)}",
            hint="fix the fleet file to match `kubectl get nodes -L "
            f"{names.fleet_label} -o wide` (allocatable {GPU_RESOURCE} from `kubectl describe "
            "node`), or take the fleet from the cluster with --fleet-from-kubernetes",
        )
    return _warnings(mine, nodes, names, region)


def _warnings(
    hosts: Sequence[Host], nodes: Sequence[Any], names: KubeNames, region: str
) -> list[str]:
    in_fleet = {h.id for h in hosts}
    left_out = sorted(
        n.metadata.name
        for n in nodes
        if n.metadata.name not in in_fleet and fleet_label(n, names) is not None
    )
    warnings = []
    if left_out:
        warnings.append(
            f"the fleet leaves out {len(left_out)} node(s) labelled {names.fleet_label} in "
            f"region {region}: {listed(left_out)}; lowcostgpu places no work there"
        )
    unusable = sorted(
        f"{n.metadata.name} ({why})"
        for n in nodes
        if n.metadata.name in in_fleet and (why := _unusable(n))
    )
    if unusable:
        warnings.append(
            f"node(s) of the fleet in region {region} that cannot run pods now: "
            f"{listed(unusable)}; their work waits until they are back"
        )
    return warnings


def _unusable(node: Any) -> str:
    if node.spec is not None and node.spec.unschedulable:
        return "cordoned"
    conditions = (node.status.conditions if node.status is not None else None) or []
    ready = next((c for c in conditions if c.type == "Ready"), None)
    if ready is None or ready.status != "True":
        return "not Ready"
    return ""


def fleet_from_kubernetes(
    nodes: Sequence[Any], catalog: Catalog, names: KubeNames, region: str, where: str = ""
) -> list[Host]:
    """The hosts of `region`: its cluster's Nodes labelled `<prefix>/fleet=<gpu type>`, each
    with its allocatable `nvidia.com/gpu`."""
    if not REGION_NAME.match(region):
        raise ConfigError(
            f"region name {region!r} is not valid",
            hint="use lower-case letters, digits and dashes, e.g. --kube-region eu-west=FILE",
        )
    hosts: list[Host] = []
    unknown, empty, bad_names = [], [], []
    for node in sorted(nodes, key=lambda n: str(n.metadata.name)):
        name, label = str(node.metadata.name), fleet_label(node, names)
        if label is None:
            continue
        gpus = gpus_of_node(node)
        if label not in catalog.gpu_types:
            unknown.append(f"{name} ({names.fleet_label}={label})")
        elif gpus < 1:
            empty.append(name)
        elif not HOST_NAME.match(name):
            bad_names.append(name)
        else:
            hosts.append(Host(id=name, pool=PoolKey(region, label), gpu_count=gpus))
    _refuse_labelled(unknown, empty, bad_names, catalog, names, region)
    if not hosts:
        raise ConfigError(
            f"the Kubernetes cluster of region {region}{where} has no node labelled "
            f"{names.fleet_label}",
            hint=f"label the GPU machines' nodes: `kubectl label node NAME "
            f"{names.fleet_label}=GPU_TYPE` (a catalog type, e.g. "
            f"{min(catalog.gpu_types)}), or give a fleet file with --fleet",
        )
    return hosts


def _refuse_labelled(
    unknown: list[str],
    empty: list[str],
    bad_names: list[str],
    catalog: Catalog,
    names: KubeNames,
    region: str,
) -> None:
    if unknown:
        raise ConfigError(
            f"node(s) of region {region} are labelled with an unknown GPU type: {listed(unknown)}",
            hint=f"label them {names.fleet_label}=TYPE with one of the catalog's GPU types: "
            f"{', '.join(sorted(catalog.gpu_types))}",
        )
    if empty:
        raise ConfigError(
            f"node(s) of region {region} labelled {names.fleet_label} have no allocatable "
            f"{GPU_RESOURCE}: {listed(empty)}",
            hint="run the NVIDIA device plugin on them (it advertises the GPUs), or remove the "
            f"label: `kubectl label node NAME {names.fleet_label}-`",
        )
    if bad_names:
        raise ConfigError(
            f"node name(s) {listed(bad_names)} of region {region} cannot be host ids of "
            "lowcostgpu (at most 63 letters, digits, '.', '-' and '_')",
            hint="use a fleet file (--fleet) that lists the nodes to use",
        )
