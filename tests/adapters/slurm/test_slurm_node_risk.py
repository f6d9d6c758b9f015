"""A preemptible cluster node at risk on a real Slurm (the session's lab): its comment says so
(`scontrol show node`), the mark clears when the pressure ends, at the drain and at removal, a
replay is harmless, a draining or removed node is never marked, and a site's own comment is
left alone."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from slurm_world import NodesWorld, entry

from lowcostgpu.adapters.slurm.node_risk import RISK_PREFIX, risk_comment
from lowcostgpu.core.effects import MarkNodeRisk
from lowcostgpu.core.nodes import NodeState

HOST = "node1"
AT = 1_796_000_000


@pytest.fixture
def world(tmp_path: Path) -> Iterator[NodesWorld]:
    w = NodesWorld(tmp_path)
    yield w
    w.slurm.update("NodeName", {"NodeName": HOST, "Comment": ""}, what="test cleanup")
    w.cleanup()


def comment(world: NodesWorld) -> str:
    return world.slurm.node_comment(HOST)


def mark(world: NodesWorld, node: NodeState, risk: str = "next", at: int = AT) -> None:
    world.nodes.carry_out(entry(MarkNodeRisk(node.id, risk, at)), None)  # type: ignore[arg-type]


def test_the_comment_says_the_node_is_at_risk_until_the_mark_is_cleared(
    world: NodesWorld,
) -> None:
    node = world.node(HOST)
    world.add(node)
    mark(world, node)
    assert comment(world) == risk_comment("next", AT)
    assert comment(world).startswith(RISK_PREFIX) and "since=2026-" in comment(world)
    mark(world, node)  # replayed: the same
    assert comment(world) == risk_comment("next", AT)
    mark(world, node, "", AT + 60)
    assert comment(world) == ""
    mark(world, node, "", AT + 60)  # replayed: still nothing
    assert comment(world) == ""


def test_the_drain_and_the_removal_clear_the_mark_and_never_bring_it_back(
    world: NodesWorld,
) -> None:
    node = world.node(HOST)
    world.add(node)
    mark(world, node)
    world.cordon(node, int(time.time()) + 60)
    assert comment(world) == ""  # the drain's reason replaces the advice
    mark(world, node)  # a late replay mid-drain
    assert comment(world) == ""
    world.remove(node)
    mark(world, node)  # a late replay after removal: no record, nothing
    assert comment(world) == ""


def test_a_sites_own_comment_is_never_overwritten_or_cleared(world: NodesWorld) -> None:
    node = world.node(HOST)
    world.add(node)
    site = {"NodeName": HOST, "Comment": "rack 4, PSU swapped"}
    world.slurm.update("NodeName", site, what="the site's comment")
    mark(world, node)
    assert comment(world) == "rack 4, PSU swapped"
    mark(world, node, "", AT + 60)
    assert comment(world) == "rack 4, PSU swapped"


def test_a_new_leader_clears_the_marks_a_previous_one_left_but_keeps_its_own(
    world: NodesWorld,
) -> None:
    """The risk state is not stored: a restarted plane would never clear an old mark itself."""
    node = world.node(HOST)
    world.add(node)
    mark(world, node)
    world.nodes.reports()  # the process that marked it: its own mark stays
    assert comment(world) == risk_comment("next", AT)
    world.provider().reports()  # a restarted control plane, on the same records
    assert comment(world) == ""


def test_a_mark_retried_after_a_later_clear_does_not_undo_it(world: NodesWorld) -> None:
    """The outbox retries a failed entry after later ones have been carried out."""
    node = world.node(HOST)
    world.add(node)
    mark(world, node, "", AT + 60)  # the episode's end, carried out first
    mark(world, node, "next", AT)  # the warning's entry, retried late
    assert comment(world) == ""
