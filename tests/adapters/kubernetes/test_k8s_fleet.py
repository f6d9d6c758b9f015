"""The fleet against the cluster's Nodes (`adapters/kubernetes/fleet.py`): pure checks over
V1Node objects, as the API server returns them."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from lowcostgpu.adapters.files import load_catalog
from lowcostgpu.adapters.kubernetes.fleet import check_fleet, fleet_from_kubernetes
from lowcostgpu.adapters.kubernetes.names import DEFAULT_NAMES, KubeNames
from lowcostgpu.domain.capacity import Host, PoolKey
from lowcostgpu.domain.errors import ConfigError

EU = PoolKey("eu-west", "a100-sxm4")
FLEET_LABEL = DEFAULT_NAMES.fleet_label


def node(
    name: str,
    gpus: int = 8,
    label: str | None = "a100-sxm4",
    *,
    ready: bool = True,
    cordoned: bool = False,
    names: KubeNames = DEFAULT_NAMES,
) -> Any:
    labels = {} if label is None else {names.fleet_label: label}
    return client.V1Node(
        metadata=client.V1ObjectMeta(name=name, labels=labels),
        spec=client.V1NodeSpec(unschedulable=cordoned),
        status=client.V1NodeStatus(
            allocatable={"nvidia.com/gpu": str(gpus), "cpu": "64"},
            conditions=[client.V1NodeCondition(type="Ready", status=str(ready))],
        ),
    )


def host(name: str, gpus: int = 8, pool: PoolKey = EU) -> Host:
    return Host(name, pool, gpus)


@pytest.mark.parametrize(
    ("hosts", "nodes", "error"),
    [
        ([host("gpu-1")], [node("gpu-2")], "host gpu-1 is no node of the cluster"),
        ([host("gpu-1", 4)], [node("gpu-1")], "the fleet says 4 GPUs, the node has 8"),
        ([host("gpu-1")], [node("gpu-1", label="h100-sxm5")], "label lowcostgpu.io/fleet=h100"),
        (  # every disagreement at once, each named
            [host("gpu-1"), host("gpu-2", 4)],
            [node("gpu-2")],
            "host gpu-1 is no node.*host gpu-2: the fleet says 4",
        ),
    ],
)
def test_a_fleet_that_disagrees_with_the_nodes_is_refused_naming_each_host(
    hosts: list[Host], nodes: list[Any], error: str
) -> None:
    with pytest.raises(ConfigError, match=error) as info:
        check_fleet(hosts, nodes, DEFAULT_NAMES, "eu-west", " at https://k8s")
    assert "kubectl get nodes" in (info.value.hint or "") and "https://k8s" in info.value.message


@pytest.mark.parametrize(
    ("nodes", "warnings"),
    [
        ([node("gpu-1")], []),
        ([node("gpu-1", label=None)], []),  # unlabelled: taken as the fleet file says
        ([node("gpu-1"), node("gpu-9")], ["leaves out 1 node(s) labelled lowcostgpu.io/fleet"]),
        ([node("gpu-1", cordoned=True)], ["cannot run pods now: gpu-1 (cordoned)"]),
        ([node("gpu-1", ready=False)], ["cannot run pods now: gpu-1 (not Ready)"]),
        ([node("gpu-1"), node("spare", label=None)], []),  # not ours: never mentioned
    ],
)
def test_what_only_stays_unused_is_a_warning(nodes: list[Any], warnings: list[str]) -> None:
    found = check_fleet([host("gpu-1")], nodes, DEFAULT_NAMES, "eu-west")
    assert len(found) == len(warnings)
    assert all(w in f for w, f in zip(warnings, found, strict=True))


def test_only_the_regions_own_hosts_are_checked_against_its_cluster() -> None:
    us = host("us-1", pool=PoolKey("us-east", "a100-sxm4"))
    assert check_fleet([host("gpu-1"), us], [node("gpu-1")], DEFAULT_NAMES, "eu-west") == []


def test_the_fleet_from_the_labelled_nodes_takes_their_allocatable_gpus() -> None:
    nodes = [node("gpu-b", 4), node("gpu-a"), node("system", label=None)]
    hosts = fleet_from_kubernetes(nodes, load_catalog(), DEFAULT_NAMES, "eu-west")
    assert hosts == [host("gpu-a"), host("gpu-b", 4)]


def test_an_operators_prefix_names_the_fleet_label() -> None:
    names = KubeNames(prefix="together.ai")
    nodes = [node("gpu-a", names=names), node("gpu-b")]  # gpu-b: the default prefix, not ours
    hosts = fleet_from_kubernetes(nodes, load_catalog(), names, "eu-west")
    assert [h.id for h in hosts] == ["gpu-a"]


@pytest.mark.parametrize(
    ("nodes", "region", "error", "hint"),
    [
        ([node("gpu-a", label="b300")], "eu-west", "unknown GPU type: gpu-a", "a100-sxm4"),
        ([node("gpu-a", 0)], "eu-west", "no allocatable nvidia.com/gpu: gpu-a", "device plugin"),
        ([node("gpu_a" * 20)], "eu-west", "cannot be host ids", "--fleet"),
        ([node("gpu-a", label=None)], "eu-west", "has no node labelled", "kubectl label node"),
        ([node("gpu-a")], "EU West", "region name 'EU West' is not valid", "eu-west"),
    ],
)
def test_unusable_labelled_nodes_are_refused_with_what_to_do(
    nodes: list[Any], region: str, error: str, hint: str
) -> None:
    with pytest.raises(ConfigError, match=error) as info:
        fleet_from_kubernetes(nodes, load_catalog(), DEFAULT_NAMES, region)
    assert hint in (info.value.hint or "")
