"""Launch and clusters take a GPU type as the user typed it; the canonical name is stored."""

from __future__ import annotations

import pytest
from plane_world import World

from lowcostgpu.app.clusters import ClusterRequest
from lowcostgpu.app.launch import LaunchRequest
from lowcostgpu.domain.errors import InvalidRequest, NotFound


@pytest.mark.parametrize("typed", ["a100-sxm4", "A100-SXM4", "a100", "A100 SXM4", "sxm4"])
def test_a_launch_stores_and_shows_the_canonical_gpu_type(typed: str) -> None:
    w = World()
    inst = w.plane.launch(LaunchRequest("acme", typed, "interruptible", 1, command=("train",)))
    assert inst.state.pool.gpu_type == "a100-sxm4"
    assert w.store.instance(inst.state.id).state.pool.gpu_type == "a100-sxm4"


@pytest.mark.parametrize("typed", ["A100", "a100"])
def test_a_cluster_stores_the_canonical_gpu_type(typed: str) -> None:
    w = World()
    view = w.plane.clusters.create_cluster(ClusterRequest("acme", typed, 4, 1, 0))
    assert view.cluster.pool.gpu_type == "a100-sxm4"


@pytest.mark.parametrize(
    ("typed", "error", "words"),
    [
        ("rtx", InvalidRequest, "'rtx' is ambiguous: it matches rtx-3090, rtx-4090, rtx-5090"),
        ("a10-sxm4", NotFound, "did you mean a100-sxm4?"),
        ("h100", NotFound, "this fleet has no h100-sxm GPUs"),  # resolved, then not in the fleet
    ],
)
def test_a_launch_with_a_wrong_gpu_name_is_one_clear_error_and_writes_nothing(
    typed: str, error: type[Exception], words: str
) -> None:
    w = World()
    with pytest.raises(error) as info:
        w.plane.launch(LaunchRequest("acme", typed, "interruptible", 1, command=("train",)))
    assert words in str(info.value)
    assert w.store.instances() == []
