"""Capacity classes (and their aliases), hosts, and the work a reclaim would lose."""

from __future__ import annotations

import pytest

from lowcostgpu.domain.capacity import Allocation, CapacityClass, Host, PoolKey
from lowcostgpu.domain.errors import InvalidRequest

POOL = PoolKey("eu-west", "a100-sxm4")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("on-demand", CapacityClass.ON_DEMAND),
        ("standard", CapacityClass.ON_DEMAND),
        ("Standard ", CapacityClass.ON_DEMAND),
        ("ondemand", CapacityClass.ON_DEMAND),
        ("interruptible", CapacityClass.INTERRUPTIBLE),
        ("preemptible", CapacityClass.INTERRUPTIBLE),
        ("PREEMPTIBLE", CapacityClass.INTERRUPTIBLE),
        ("spot", CapacityClass.INTERRUPTIBLE),
    ],
)
def test_both_spellings_parse_to_one_class(text: str, expected: CapacityClass) -> None:
    assert CapacityClass.parse(text) is expected


def test_unknown_class_says_which_spellings_exist() -> None:
    with pytest.raises(InvalidRequest) as info:
        CapacityClass.parse("cheap")
    assert "cheap" in str(info.value)
    assert "standard" in str(info.value) and "preemptible" in str(info.value)


@pytest.mark.parametrize(
    ("cls", "preemptible", "label"),
    [
        (CapacityClass.ON_DEMAND, False, "standard"),
        (CapacityClass.INTERRUPTIBLE, True, "preemptible"),
    ],
)
def test_class_label_and_preemptibility(cls: CapacityClass, preemptible: bool, label: str) -> None:
    assert cls.preemptible is preemptible
    assert cls.compute_class_label == label


@pytest.mark.parametrize("gpus", [0, -1])
def test_a_host_needs_at_least_one_gpu(gpus: int) -> None:
    with pytest.raises(InvalidRequest, match="gpu_count"):
        Host("h", POOL, gpus)


def test_pool_prints_as_region_slash_gpu_type() -> None:
    assert str(POOL) == "eu-west/a100-sxm4"


def _alloc(gpus: int, started_at: int, checkpoint: int | None) -> Allocation:
    return Allocation(
        id="a1",
        subject_id="i1",
        host_id="h",
        pool=POOL,
        gpu_indices=frozenset(range(gpus)),
        capacity_class=CapacityClass.INTERRUPTIBLE,
        started_at=started_at,
        last_checkpoint_at=checkpoint,
    )


@pytest.mark.parametrize(
    ("gpus", "started_at", "checkpoint", "now", "at_risk"),
    [
        (4, 1000, None, 1600, 4 * 600),  # never checkpointed: everything since the start
        (4, 1000, 1500, 1600, 4 * 100),  # since the last checkpoint
        (2, 1000, 900, 1600, 2 * 600),  # a checkpoint from before this start counts as none
        (2, 1000, 1000, 1600, 2 * 600),  # a checkpoint at the start is the start
        (8, 1000, 1600, 1600, 0),  # just checkpointed: nothing at risk
        (8, 1000, 2000, 1600, 0),  # a report from the future counts as now
        (1, 1000, None, 900, 0),  # `now` before the start: nothing, never negative
    ],
)
def test_work_at_risk_counts_gpu_seconds_since_the_checkpoint_or_start(
    gpus: int, started_at: int, checkpoint: int | None, now: int, at_risk: int
) -> None:
    alloc = _alloc(gpus, started_at, checkpoint)
    assert alloc.work_at_risk_gpu_s(now) == at_risk
    assert alloc.gpus == gpus
    assert alloc.preemptible


def test_runtime_never_negative() -> None:
    assert _alloc(1, 1000, None).runtime_s(900) == 0
    assert _alloc(1, 1000, None).runtime_s(1300) == 300
