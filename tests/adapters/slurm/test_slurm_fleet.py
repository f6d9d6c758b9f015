"""The fleet of `--runtime slurm`: sinfo's nodes parsed, the fleet file checked against the
partition (an error naming each disagreement, a warning for nodes left out), and the fleet built
from the partition — parsing on text, the checks on the session's real Slurm lab."""

from __future__ import annotations

import pytest

import slurm_lab
from lowcostgpu.adapters.files import load_catalog
from lowcostgpu.adapters.slurm import Slurm
from lowcostgpu.adapters.slurm.fleet import (
    PartitionNode,
    check_cluster,
    check_fleet,
    fleet_from_slurm,
    parse_sinfo,
    partition_nodes,
)
from lowcostgpu.domain.capacity import Host, PoolKey
from lowcostgpu.domain.errors import ConfigError

CATALOG = load_catalog()
A100 = PoolKey("eu", "a100-sxm4")


def host(name: str, gpus: int, pool: PoolKey = A100) -> Host:
    return Host(id=name, pool=pool, gpu_count=gpus)


def node(
    name: str, gpus: int, *, gres_types: tuple[str, ...] = (), state: str = "idle"
) -> PartitionNode:
    return PartitionNode(name, gpus, gres_types, (), state, "10.0.0.1")


def test_sinfo_lines_give_each_node_once_with_its_gpus_types_features_and_address() -> None:
    text = (
        "gpu-b|gpu:a100-sxm4:8(S:0-1)|mixed|preemptible,a100-sxm4|10.0.0.2\n"
        "gpu-a|gpu:4|idle|(null)|127.0.0.1\n"
        "gpu-a|gpu:4|allocated|(null)|127.0.0.1\n"  # listed again (another state): kept once
        "cpu-1|(null)|idle|(null)|localhost\n"
        "garbage line\n"
        "gpu-c|gpu:h100:2,gpu:rtx-4090:1|down*|(null)|gpu-c.site\n"
    )
    nodes = {n.name: n for n in parse_sinfo(text)}
    assert sorted(nodes) == ["cpu-1", "gpu-a", "gpu-b", "gpu-c"]
    assert (nodes["gpu-a"].gpus, nodes["gpu-a"].state, nodes["gpu-a"].gres_types) == (4, "idle", ())
    assert nodes["gpu-b"].gres_types == ("a100-sxm4",)
    assert nodes["gpu-b"].features == ("preemptible", "a100-sxm4")
    assert nodes["gpu-c"].gpus == 3 and nodes["gpu-c"].gres_types == ("h100", "rtx-4090")
    assert nodes["cpu-1"].gpus == 0
    assert [n.usable for n in (nodes["gpu-a"], nodes["gpu-b"], nodes["gpu-c"])] == [
        True,
        True,
        False,
    ]
    assert nodes["gpu-a"].on_loopback and nodes["cpu-1"].on_loopback
    assert not nodes["gpu-b"].on_loopback and not nodes["gpu-c"].on_loopback


def test_a_node_names_its_gpu_type_by_gres_type_or_by_a_feature_of_the_catalog() -> None:
    by_gres = PartitionNode("n", 8, ("a100-sxm4",), (), "idle", "x")
    by_feature = PartitionNode("n", 8, ("a100",), ("preemptible", "rtx-4090"), "idle", "x")
    unnamed = PartitionNode("n", 8, ("a100",), ("preemptible",), "idle", "x")
    assert by_gres.gpu_type(CATALOG) == "a100-sxm4"
    assert by_feature.gpu_type(CATALOG) == "rtx-4090"
    assert unnamed.gpu_type(CATALOG) is None


def test_every_disagreement_is_named_in_one_error() -> None:
    nodes = [node("n1", 4), node("n2", 4, gres_types=("rtx-4090",))]
    fleet = [host("n1", 8), host("n2", 4), host("gpu-x", 4)]
    with pytest.raises(ConfigError) as raised:
        check_fleet(fleet, nodes, "lowcostgpu", CATALOG)
    message = raised.value.message
    assert "host n1: the fleet says 8 GPUs, Slurm 4" in message
    assert "host n2: the fleet says GPU type a100-sxm4, Slurm rtx-4090" in message
    assert "host gpu-x is not a node of the partition" in message
    assert "nodes: n1, n2" in message
    assert "--fleet-from-slurm" in (raised.value.hint or "")


def test_a_node_left_out_of_the_fleet_or_down_is_a_warning() -> None:
    nodes = [node("n1", 4, state="down*"), node("n2", 4), node("n3", 4)]
    warnings = check_fleet([host("n1", 4)], nodes, "lowcostgpu", CATALOG)
    assert any("leaves out 2 node(s)" in w and "n2, n3" in w for w in warnings), warnings
    assert any("n1 (down*)" in w for w in warnings), warnings


def test_the_fleet_from_slurm_takes_gpu_nodes_with_their_named_type_else_the_default() -> None:
    nodes = [node("a", 8, gres_types=("h100",)), node("b", 4, gres_types=("rtx-4090",))]
    nodes.append(node("cpu", 0))
    hosts = fleet_from_slurm(nodes, CATALOG, region="eu", partition="p", gpu_type="a100-sxm4")
    assert hosts == [host("a", 8), host("b", 4, PoolKey("eu", "rtx-4090"))]


@pytest.mark.parametrize(
    ("nodes", "gpu_type", "region", "words"),
    [
        ([node("a", 8)], None, "eu", "does not say the GPU type of node(s) a"),
        ([node("a", 0)], "a100-sxm4", "eu", "has no node with a GPU"),
        ([node("a", 8)], "b200", "eu", "unknown GPU type 'b200'"),
        ([node("a", 8)], "a100-sxm4", "EU West", "region name 'EU West' is not valid"),
    ],
    ids=["untyped", "no-gpus", "unknown-type", "bad-region"],
)
def test_a_fleet_that_cannot_be_taken_from_slurm_says_why(
    nodes: list[PartitionNode], gpu_type: str | None, region: str, words: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        fleet_from_slurm(nodes, CATALOG, region=region, partition="p", gpu_type=gpu_type)
    assert words in raised.value.message


# -- on the real lab -------------------------------------------------------------------------


def test_the_lab_partition_matches_a_fleet_of_its_nodes_without_warnings() -> None:
    lab = slurm_lab.require()
    slurm = Slurm(lab.conf)
    check_cluster(slurm, "lowcostgpu")
    nodes = partition_nodes(slurm, "lowcostgpu")
    assert [(n.name, n.gpus) for n in nodes] == [(h, slurm_lab.GPUS) for h in lab.hosts]
    fleet = [host(name, slurm_lab.GPUS) for name in lab.hosts]
    assert check_fleet(fleet, nodes, "lowcostgpu", CATALOG) == []
    built = fleet_from_slurm(
        nodes, CATALOG, region="eu", partition="lowcostgpu", gpu_type="a100-sxm4"
    )
    assert built == fleet  # the lab's gres names no type: the default type applies


def test_a_fleet_that_disagrees_with_the_lab_is_refused() -> None:
    lab = slurm_lab.require()
    nodes = partition_nodes(Slurm(lab.conf), "lowcostgpu")
    with pytest.raises(ConfigError) as raised:
        check_fleet([host("node1", 8), host("eu-a100", 8)], nodes, "lowcostgpu", CATALOG)
    assert "host node1: the fleet says 8 GPUs, Slurm 4" in raised.value.message
    assert "host eu-a100 is not a node of the partition" in raised.value.message


def test_a_partition_that_is_not_there_is_refused_naming_the_ones_that_are() -> None:
    lab = slurm_lab.require()
    with pytest.raises(ConfigError) as raised:
        check_cluster(Slurm(lab.conf), "gpu-nope")
    assert "has no partition 'gpu-nope'" in raised.value.message
    assert "lowcostgpu" in (raised.value.hint or "")
