"""The Runtime contract, run against LocalRuntime (real processes), KubernetesRuntime (pods on a
real kube-apiserver) and FakeRuntime alike."""

from __future__ import annotations

from dataclasses import replace

import pytest

from conftest import (
    MISSING_COMMAND,
    FakeHarness,
    KubernetesHarness,
    LocalHarness,
    report_of,
    wait_phase,
    workload_start,
)
from lowcostgpu.domain.errors import Conflict, InvalidRequest, NotFound
from waiting import wait_until

Harness = LocalHarness | FakeHarness | KubernetesHarness


@pytest.mark.parametrize("exit_code", [0, 3])
def test_a_workload_is_running_until_it_exits_with_its_code(
    harness: Harness, exit_code: int
) -> None:
    harness.start("a-1")
    harness.wait_running("a-1")
    running = report_of(harness.runtime, "a-1")
    assert running is not None and running.instance_id == "i-a-1" and running.at is not None
    harness.finish("a-1", exit_code)
    exited = wait_phase(harness.runtime, "a-1", "exited")
    assert exited.exit_code == exit_code
    assert exited.at is not None and exited.at >= running.at


def test_reports_are_level_triggered_until_forget(harness: Harness) -> None:
    allocation_id = "i-3f2a@1700000000"  # the core's allocation ids: subject@placed_at
    harness.start(allocation_id)
    harness.wait_running(allocation_id)
    harness.finish(allocation_id, 0)
    first = wait_phase(harness.runtime, allocation_id, "exited")
    assert harness.runtime.observe() == [first]
    assert harness.runtime.observe() == [first]
    harness.runtime.forget(allocation_id)
    assert harness.runtime.observe() == []
    harness.runtime.forget(allocation_id)  # forgetting twice is harmless


def test_a_second_start_of_the_same_allocation_starts_nothing(harness: Harness) -> None:
    start = harness.start("a-1")
    harness.runtime.start(start)
    harness.wait_running("a-1")
    harness.runtime.start(start)
    assert [r.allocation_id for r in harness.runtime.observe()] == ["a-1"]
    assert harness.process_count("a-1") == 1
    harness.finish("a-1", 0)
    wait_phase(harness.runtime, "a-1", "exited")


def test_sigterm_is_delivered_and_the_workload_decides_when_to_exit(harness: Harness) -> None:
    harness.start("a-1")
    harness.wait_running("a-1")
    harness.runtime.signal("a-1", "SIGTERM")
    assert harness.got_sigterm("a-1")
    report = report_of(harness.runtime, "a-1")
    assert report is not None and report.phase == "running"  # it is checkpointing
    harness.finish("a-1", 0)
    assert wait_phase(harness.runtime, "a-1", "exited").exit_code == 0


def test_kill_ends_the_workload_with_128_plus_sigkill(harness: Harness) -> None:
    harness.start("a-1")
    harness.wait_running("a-1")
    harness.runtime.signal("a-1", "SIGTERM")
    harness.runtime.kill("a-1")
    assert wait_phase(harness.runtime, "a-1", "exited").exit_code == 137
    assert harness.process_count("a-1") == 0


def test_signal_and_kill_of_an_ended_or_unknown_workload_do_nothing(harness: Harness) -> None:
    harness.start("a-1")
    harness.wait_running("a-1")
    harness.finish("a-1", 4)
    wait_phase(harness.runtime, "a-1", "exited")
    for allocation_id in ("a-1", "a-unknown"):
        harness.runtime.signal(allocation_id, "SIGTERM")
        harness.runtime.kill(allocation_id)
    assert wait_phase(harness.runtime, "a-1", "exited").exit_code == 4


def test_a_missing_command_fails_to_start_with_the_reason(harness: Harness) -> None:
    harness.start("a-ok")
    harness.runtime.start(
        workload_start("a-bad", (MISSING_COMMAND, "--flag"), host_id=harness.host_id)
    )
    failed = wait_phase(harness.runtime, "a-bad", "start_failed")
    assert "no such file" in failed.reason and MISSING_COMMAND in failed.reason
    harness.wait_running("a-ok")  # the other workload is not affected
    harness.runtime.kill("a-bad")  # nothing runs: a no-op
    harness.runtime.forget("a-bad")
    assert [r.allocation_id for r in harness.runtime.observe()] == ["a-ok"]
    harness.runtime.kill("a-ok")
    wait_phase(harness.runtime, "a-ok", "exited")


def test_forget_refuses_a_running_workload(harness: Harness) -> None:
    harness.start("a-1")
    harness.wait_running("a-1")
    with pytest.raises(Conflict, match="still running"):
        harness.runtime.forget("a-1")
    harness.runtime.kill("a-1")
    wait_phase(harness.runtime, "a-1", "exited")
    harness.runtime.forget("a-1")


@pytest.mark.parametrize(
    "allocation_id", ["../escape", "a/b", "", ".hidden", "..", "-x", "x" * 129]
)
def test_an_allocation_id_that_is_no_plain_name_is_refused(
    harness: Harness, allocation_id: str
) -> None:
    with pytest.raises(InvalidRequest, match="allocation id"):
        harness.start(allocation_id)


def test_an_empty_command_is_refused(harness: Harness) -> None:
    start = harness.start("a-1")
    harness.runtime.kill("a-1")
    with pytest.raises(InvalidRequest, match="empty command"):
        harness.runtime.start(replace(start, allocation_id="a-2", argv=()))
    wait_phase(harness.runtime, "a-1", "exited")


def test_logs_of_an_unknown_workload_are_not_found(harness: Harness) -> None:
    with pytest.raises(NotFound, match="a-nobody"):
        harness.runtime.logs("a-nobody")


def test_many_workloads_are_reported_together_sorted(harness: Harness) -> None:
    for allocation_id in ("a-2", "a-1", "a-3"):
        harness.start(allocation_id)
    for allocation_id in ("a-1", "a-2", "a-3"):
        harness.wait_running(allocation_id)
    harness.finish("a-2", 9)
    wait_until(
        lambda: [r.phase for r in harness.runtime.observe()] == ["running", "exited", "running"]
    )
    for allocation_id in ("a-1", "a-3"):
        harness.runtime.kill(allocation_id)
        wait_phase(harness.runtime, allocation_id, "exited")
