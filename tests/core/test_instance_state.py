"""`instance_state.evolve` is `dataclasses.replace` of the fields a transition may change."""

from __future__ import annotations

import inspect
from dataclasses import fields, replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lowcostgpu.core.instance_state import InstanceState, Member, Run, evolve
from lowcostgpu.domain.capacity import CapacityClass, PoolKey
from lowcostgpu.domain.status import InstanceStatus

# The identity, sizing and grace period: validated once by `__post_init__`, never changed.
FIXED = {
    "id",
    "account_id",
    "pool",
    "gpus",
    "capacity_class",
    "auto_requeue",
    "grace_period_s",
    "nodes",
    "hold_survivors_s",
}

BASE = InstanceState(
    "i-1",
    "acct",
    PoolKey("eu", "a100-sxm4"),
    2,
    CapacityClass.INTERRUPTIBLE,
    grace_period_s=30,
    enqueued_at=5,
    allocation_id="a-1",
    host_id="h-1",
    gpu_indices=(0, 1),
    runs=(Run("a-0", 1, 4),),
)

# One value per field, different from BASE's.
CHANGES: dict[str, Any] = {
    "status": InstanceStatus.RUNNING,
    "enqueued_at": None,
    "restart_count": 3,
    "placement_count": 4,
    "allocation_id": None,
    "host_id": "h-2",
    "gpu_indices": (4, 5),
    "waiting_for": frozenset({"a-9"}),
    "started_at": 10,
    "notice_at": 11,
    "deadline": 12,
    "signal_sent_at": 13,
    "drain_reason": "stop",
    "preempted_for": "od-1",
    "stop_requested": True,
    "last_checkpoint_step": 7,
    "last_checkpoint_at": 9,
    "save_s_reports": (30, 12),
    "saves_on_notice": True,
    "interruption_count": 2,
    "last_interrupted_at": 8,
    "exit_code": 143,
    "failure_reason": "exited 1",
    "completed_reported": True,
    "runs": (),
    "members": (Member("i-1@5:r1", "h2", (0, 1)),),
    "exited_ranks": frozenset({1}),
    "held_hosts": ("h2",),
    "held_until": 400,
    "held_runs": (Run("i-1@5:held", 100, None, 2),),
}


def test_evolve_takes_every_field_but_the_fixed_ones() -> None:
    """A field added to `InstanceState` must be added to `evolve` (or it would be dropped)."""
    params = set(inspect.signature(evolve).parameters) - {"s"}
    assert params == {f.name for f in fields(InstanceState)} - FIXED
    assert params == set(CHANGES)


@pytest.mark.parametrize("name", sorted(CHANGES))
def test_evolve_changes_one_field_as_replace_does(name: str) -> None:
    new = evolve(BASE, **{name: CHANGES[name]})
    assert new == replace(BASE, **{name: CHANGES[name]})
    assert getattr(new, name) == CHANGES[name] != getattr(BASE, name)
    assert hash(new) == hash(replace(BASE, **{name: CHANGES[name]}))


def test_evolve_without_changes_is_an_equal_copy() -> None:
    new = evolve(BASE)
    assert new == BASE and new is not BASE


@given(st.sets(st.sampled_from(sorted(CHANGES))))
def test_evolve_changes_any_fields_as_replace_does(names: set[str]) -> None:
    changes = {n: CHANGES[n] for n in names}
    assert evolve(BASE, **changes) == replace(BASE, **changes)
