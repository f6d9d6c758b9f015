"""Every edge of every transition table is accepted; every other pair is refused, clearly."""

from __future__ import annotations

from collections.abc import Mapping
from itertools import product
from typing import Any

import pytest

from lowcostgpu.domain.errors import Conflict, IllegalTransition
from lowcostgpu.domain.status import (
    CLUSTER_TRANSITIONS,
    INSTANCE_HOLDS_GPUS,
    INSTANCE_TRANSITIONS,
    NODE_TRANSITIONS,
    ClusterStatus,
    InstanceStatus,
    NodeStatus,
    check_transition,
)

TABLES: list[tuple[str, Mapping[Any, frozenset[Any]], type]] = [
    ("instance", INSTANCE_TRANSITIONS, InstanceStatus),
    ("node", NODE_TRANSITIONS, NodeStatus),
    ("cluster", CLUSTER_TRANSITIONS, ClusterStatus),
]


def _pairs(edges: bool) -> list[Any]:
    params = []
    for kind, table, enum in TABLES:
        for current, target in product(enum, enum):
            if (target in table[current]) is edges:
                params.append(
                    pytest.param(table, current, target, id=f"{kind}:{current}->{target}")
                )
    return params


@pytest.mark.parametrize(("kind", "table", "enum"), TABLES, ids=[t[0] for t in TABLES])
def test_every_status_has_a_row_and_edges_stay_inside_the_enum(
    kind: str, table: Mapping[Any, frozenset[Any]], enum: type
) -> None:
    assert set(table) == set(enum), f"{kind} table must have one row per status"
    for targets in table.values():
        assert targets <= set(enum)


@pytest.mark.parametrize(("table", "current", "target"), _pairs(edges=True))
def test_every_edge_is_accepted(table: Any, current: Any, target: Any) -> None:
    assert check_transition(table, current, target, subject="thing-1") is target


@pytest.mark.parametrize(("table", "current", "target"), _pairs(edges=False))
def test_every_non_edge_is_refused_naming_both_statuses_and_the_allowed_ones(
    table: Any, current: Any, target: Any
) -> None:
    with pytest.raises(IllegalTransition) as info:
        check_transition(table, current, target, subject="thing-1")
    text = str(info.value)
    assert f"from {current} to {target}" in text
    assert "thing-1" in text
    allowed = sorted(table[current])
    if allowed:
        assert ", ".join(allowed) in text
    else:
        assert "final" in text
    assert info.value.details == {
        "subject": "thing-1",
        "current": str(current),
        "target": str(target),
    }
    assert isinstance(info.value, Conflict)
    assert info.value.to_dict()["code"] == "illegal_transition"


@pytest.mark.parametrize(
    ("table", "terminal"),
    [
        (INSTANCE_TRANSITIONS, InstanceStatus.DELETED),
        (NODE_TRANSITIONS, NodeStatus.REMOVED),
        (CLUSTER_TRANSITIONS, ClusterStatus.DELETED),
    ],
)
def test_terminal_statuses_lead_nowhere(table: Any, terminal: Any) -> None:
    assert table[terminal] == frozenset()


def test_every_status_can_reach_a_terminal_one() -> None:
    for table, terminal in [
        (INSTANCE_TRANSITIONS, InstanceStatus.DELETED),
        (NODE_TRANSITIONS, NodeStatus.REMOVED),
        (CLUSTER_TRANSITIONS, ClusterStatus.DELETED),
    ]:
        for start in table:
            seen, frontier = {start}, [start]
            while frontier:
                for nxt in table[frontier.pop()]:
                    if nxt not in seen:
                        seen.add(nxt)
                        frontier.append(nxt)
            assert terminal in seen, f"{start} cannot reach {terminal}"


def test_an_interrupted_instance_only_leaves_interrupting_by_stopping() -> None:
    """T+grace always ends in `interrupted`: a reclaim never turns into failed or deleted."""
    assert INSTANCE_TRANSITIONS[InstanceStatus.INTERRUPTING] == {InstanceStatus.INTERRUPTED}


def test_statuses_holding_gpus_are_exactly_the_ones_with_a_live_workload() -> None:
    assert {
        InstanceStatus.STARTING,
        InstanceStatus.RUNNING,
        InstanceStatus.INTERRUPTING,
        InstanceStatus.STOPPING,
    } == INSTANCE_HOLDS_GPUS
