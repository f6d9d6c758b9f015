"""Which runtime reports a tick takes in (`ReportObserver`): every one at a full look (the first
tick, after a failed tick or a reload, every `full_every_s`, a new runtime), else the changes,
with the orphans not forgotten yet handed in again."""

from __future__ import annotations

import pytest
from plane_world import World

from lowcostgpu.adapters.fakes import FakeRuntime
from lowcostgpu.app.launch import LaunchRequest
from lowcostgpu.app.runtime_reports import ReportObserver
from lowcostgpu.domain.status import InstanceStatus
from lowcostgpu.ports.runtime import WorkloadReport
from lowcostgpu.ports.store_records import Commit


class Recording(FakeRuntime):
    """A fake that records the cursors it was asked for."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[int | None] = []

    def changes_since(self, cursor: int | None) -> tuple[list[WorkloadReport], int]:
        self.asked.append(cursor)
        return super().changes_since(cursor)


def report(allocation_id: str, phase: str = "running") -> WorkloadReport:
    return WorkloadReport(allocation_id, f"i-{allocation_id}", phase)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("between", "full"),
    [
        (lambda o, rt: None, False),  # nothing happened: only changes
        (lambda o, rt: o.missed(), True),  # a failed tick or a reload
    ],
)
def test_a_full_look_comes_first_and_again_only_when_something_was_missed(
    between: object, full: bool
) -> None:
    rt, observer = Recording(), ReportObserver(full_every_s=300)
    observer.reports(rt, 0)
    observer.reports(rt, 1)
    between(observer, rt)  # type: ignore[operator]
    observer.reports(rt, 2)
    assert rt.asked[0] is None and rt.asked[1] is not None
    assert (rt.asked[2] is None) is full


@pytest.mark.parametrize(("now", "full"), [(299, False), (300, True)])
def test_a_full_look_at_least_every_full_every_s(now: int, full: bool) -> None:
    rt, observer = Recording(), ReportObserver(full_every_s=300)
    observer.reports(rt, 0)
    observer.reports(rt, now)
    assert (rt.asked[1] is None) is full


def test_a_new_runtime_is_looked_at_in_full() -> None:
    first, second, observer = Recording(), Recording(), ReportObserver()
    observer.reports(first, 0)
    observer.reports(second, 1)
    assert second.asked == [None]


def test_kept_orphans_are_handed_in_again_until_a_full_look() -> None:
    rt, observer = Recording(), ReportObserver()
    observer.reports(rt, 0)
    observer.keep([report("a-9")])
    assert observer.reports(rt, 1) == [report("a-9")]
    observer.missed()
    assert observer.reports(rt, 2) == []  # the full look reports what is really there


def test_a_runtime_without_changes_is_observed_in_full_every_tick() -> None:
    class Plain:
        def observe(self) -> list[WorkloadReport]:
            return [report("a-1")]

    observer = ReportObserver()
    assert observer.reports(Plain(), 0) == observer.reports(Plain(), 1) == [report("a-1")]  # type: ignore[arg-type]


def test_an_exit_taken_in_by_a_tick_that_failed_is_taken_in_again() -> None:
    w = World()
    req = LaunchRequest("acme", "a100-sxm4", "interruptible", 8, command=("train",))
    i = w.plane.launch(req).state.id
    w.tick(1)
    assert w.store.instance(i).state.status is InstanceStatus.RUNNING
    w.runtime.finish(w.allocation(i), 0)
    commit = w.store.commit

    def failing(c: Commit) -> None:
        raise OSError("the disk is full")

    w.store.commit = failing  # type: ignore[method-assign]
    with pytest.raises(OSError):
        w.tick(1)
    w.store.commit = commit  # type: ignore[method-assign]
    w.tick(1)  # the runtime reports no change now: the exit comes from the full look
    assert w.store.instance(i).state.status is InstanceStatus.SUCCEEDED
