"""`changes_since` (ports.runtime.ChangeReporting): what changed, not every workload; on the
local runtime (real processes, exits seen through their shims' pidfds) and the fake alike."""

from __future__ import annotations

from typing import Any

import pytest

from conftest import FakeHarness, LocalHarness, report_of, wait_phase
from lowcostgpu.ports.runtime import WorkloadReport
from waiting import wait_until

Harness = LocalHarness | FakeHarness


@pytest.fixture(params=["local", "fake"])
def changing(request: pytest.FixtureRequest, tmp_path: Any) -> Any:
    h: Harness = LocalHarness(tmp_path) if request.param == "local" else FakeHarness()
    yield h
    h.cleanup()


def changed_until(runtime: Any, cursor: int, want: Any) -> tuple[list[WorkloadReport], int]:
    """Looks at the changes until `want(reports)`; every change seen on the way is returned."""
    seen: list[WorkloadReport] = []

    def looked() -> bool:
        nonlocal cursor
        reports, cursor = runtime.changes_since(cursor)
        seen.extend(reports)
        return bool(want(seen))

    wait_until(looked, what="the change")
    return seen, cursor


def test_a_cursor_of_none_is_every_workload_and_then_only_changes_come(changing: Harness) -> None:
    for a in ("a-1", "a-2", "a-3"):
        changing.start(a)
        changing.wait_running(a)
    everything, cursor = changing.runtime.changes_since(None)
    assert everything == changing.runtime.observe()
    assert [r.allocation_id for r in everything] == ["a-1", "a-2", "a-3"]
    nothing, cursor = changing.runtime.changes_since(cursor)
    assert nothing == []
    changing.finish("a-2", 3)
    seen, cursor = changed_until(
        changing.runtime, cursor, lambda rs: any(r.phase == "exited" for r in rs)
    )
    assert {r.allocation_id for r in seen} == {"a-2"}
    assert seen[-1] == report_of(changing.runtime, "a-2") and seen[-1].exit_code == 3
    assert changing.runtime.changes_since(cursor)[0] == []


def test_a_start_is_a_change_until_it_runs(changing: Harness) -> None:
    _, cursor = changing.runtime.changes_since(None)
    changing.start("a-1")
    seen, _ = changed_until(
        changing.runtime, cursor, lambda rs: any(r.phase == "running" for r in rs)
    )
    assert {r.allocation_id for r in seen} == {"a-1"}


def test_each_caller_keeps_its_own_cursor_and_a_forgotten_workload_is_left_out(
    changing: Harness,
) -> None:
    changing.start("a-1")
    changing.wait_running("a-1")
    _, first = changing.runtime.changes_since(None)
    _, second = changing.runtime.changes_since(None)
    changing.finish("a-1", 0)
    changed_until(changing.runtime, first, lambda rs: any(r.phase == "exited" for r in rs))
    assert [r.phase for r in changing.runtime.changes_since(second)[0]] == ["exited"]
    changing.runtime.forget("a-1")
    assert changing.runtime.changes_since(second)[0] == []


def test_a_workload_found_by_a_full_look_of_a_restarted_runtime_reports_its_exit(
    local: LocalHarness,
) -> None:
    local.start("a-1")
    local.wait_running("a-1")
    restarted = local.another_runtime()  # not the shim's parent: its pid comes from shim.json
    _, cursor = restarted.changes_since(None)
    local.finish("a-1", 5)
    seen, _ = changed_until(restarted, cursor, lambda rs: any(r.phase == "exited" for r in rs))
    assert [(r.phase, r.exit_code) for r in seen] == [("exited", 5)]
    wait_phase(local.runtime, "a-1", "exited")
