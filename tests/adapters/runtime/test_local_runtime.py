"""What only the local runtime can show: environment, process groups, restarts, crashes, pids."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from conftest import (
    LocalHarness,
    processes_mentioning,
    report_of,
    volume_mount,
    wait_phase,
    workload_start,
)
from lowcostgpu.adapters.local import LocalRuntime
from lowcostgpu.adapters.local import runtime as runtime_module
from lowcostgpu.adapters.local import shim as shim_files
from lowcostgpu.adapters.local.state import RELAUNCH_REASON
from waiting import wait_until


def test_the_workload_sees_its_gpus_volume_and_env_and_runs_in_the_volume(
    local: LocalHarness, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOWCOSTGPU_TEST_SECRET", "server-only")
    runtime = local.another_runtime()  # reads the server's environment now
    volume = volume_mount(tmp_path / "vol")
    env = {"LOWCOSTGPU_INSTANCE_ID": "i-7"}
    runtime.start(workload_start("a-1", local.argv("a-1"), env=env, volume=volume))
    local.wait_running("a-1")
    log = runtime.logs("a-1")
    assert "CUDA_VISIBLE_DEVICES=0,2\n" in log
    assert f"LOWCOSTGPU_VOLUME={volume.path}\n" in log and f"CWD={volume.path}\n" in log
    assert "LOWCOSTGPU_INSTANCE_ID=i-7\n" in log
    assert "SECRET=<unset>\n" in log  # the server's own environment stays out
    local.finish("a-1", 0)
    wait_phase(runtime, "a-1", "exited")


def test_without_volume_or_gpus_it_runs_in_its_own_directory_with_no_gpu_visible(
    local: LocalHarness,
) -> None:
    local.start("a-1", gpu_indices=())
    local.wait_running("a-1")
    log = local.runtime.logs("a-1")
    assert "CUDA_VISIBLE_DEVICES=\n" in log and "LOWCOSTGPU_VOLUME=<unset>\n" in log
    assert f"CWD={local.runtime.state_dir / 'a-1' / 'work'}\n" in log
    assert local.runtime.logs("a-1", tail_bytes=10) == log[-10:]
    local.finish("a-1", 0)
    wait_phase(local.runtime, "a-1", "exited")


def test_sigterm_reaches_the_whole_process_group(local: LocalHarness) -> None:
    local.start("a-1", "--child")
    local.wait_running("a-1")
    local.runtime.signal("a-1", "SIGTERM")
    control = local.control("a-1")
    for role in ("main", "child"):
        wait_until((control / f"sigterm-{role}").exists, what=f"SIGTERM of the {role} process")
    local.runtime.kill("a-1")
    assert wait_phase(local.runtime, "a-1", "exited").exit_code == 137
    wait_until(lambda: not processes_mentioning(str(control)), what="child killed with the group")


def test_children_left_behind_by_an_ended_workload_are_killed_with_its_group(
    local: LocalHarness,
) -> None:
    local.start("a-1", "--child")
    local.wait_running("a-1")
    child_pid = int((local.control("a-1") / "ready-child").read_text())
    local.finish("a-1", 5)  # the main process exits; its child would run forever
    assert wait_phase(local.runtime, "a-1", "exited").exit_code == 5
    wait_until(lambda: shim_files.process_start_ticks(child_pid) is None, what="child gone")


@pytest.mark.parametrize(
    ("code", "exit_code"),
    [
        ("raise SystemExit(7)", 7),
        ("import os, signal; os.kill(os.getpid(), signal.SIGTERM)", 128 + 15),
        ("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)", 128 + 11),
    ],
)
def test_exit_codes_are_shell_like(local: LocalHarness, code: str, exit_code: int) -> None:
    local.runtime.start(workload_start("a-1", (sys.executable, "-c", code)))
    assert wait_phase(local.runtime, "a-1", "exited").exit_code == exit_code


def test_a_new_runtime_on_the_same_state_dir_finds_running_and_exited_workloads(
    local: LocalHarness,
) -> None:
    local.start("a-1")
    local.start("a-2")
    local.wait_running("a-1")
    local.wait_running("a-2")
    local.finish("a-2", 3)
    wait_phase(local.runtime, "a-2", "exited")
    restarted = local.another_runtime()
    phases = {r.allocation_id: (r.phase, r.exit_code) for r in restarted.observe()}
    assert phases == {"a-1": ("running", None), "a-2": ("exited", 3)}
    restarted.start(workload_start("a-1", local.argv("a-1")))  # a retried start: still one
    assert local.process_count("a-1") == 1
    local.finish("a-1", 4)
    assert wait_phase(restarted, "a-1", "exited").exit_code == 4


CREATOR = """
import sys, time
from lowcostgpu.adapters.local import LocalRuntime
from lowcostgpu.ports.runtime import WorkloadStart
runtime = LocalRuntime(sys.argv[1])
runtime.start(WorkloadStart("i-1", "a-1", "h-1", (0,), 0, tuple(sys.argv[2:])))
print("started", flush=True)
time.sleep(60)
"""


def test_the_workload_outlives_a_sigkilled_control_plane_and_its_exit_is_recorded(
    local: LocalHarness,
) -> None:
    state = local.runtime.state_dir
    server = subprocess.Popen(
        [sys.executable, "-c", CREATOR, str(state), *local.argv("a-1")],
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    assert server.stdout is not None and server.stdout.readline() == b"started\n"
    os.killpg(server.pid, signal.SIGKILL)  # the whole server group, as a crash test does
    server.wait()
    local.wait_running("a-1")
    local.finish("a-1", 6)
    assert wait_phase(local.runtime, "a-1", "exited").exit_code == 6


def test_a_sigkilled_shim_never_leaves_a_workload_running_forever(local: LocalHarness) -> None:
    local.start("a-1")
    local.wait_running("a-1")
    shim_pid = shim_files.read_json(local.runtime.state_dir / "a-1" / shim_files.SHIM_RECORD)
    assert shim_pid is not None
    os.kill(shim_pid["pid"], signal.SIGKILL)
    wait_until(lambda: shim_files.process_start_ticks(shim_pid["pid"]) is None, what="shim gone")
    report = report_of(local.runtime, "a-1")
    assert report is not None and report.phase == "running"  # the workload itself still runs
    local.runtime.kill("a-1")
    gone = wait_phase(local.runtime, "a-1", "exited")
    assert gone.exit_code is None and "unknown" in gone.reason


def test_a_reused_pid_is_not_taken_for_the_workload(local: LocalHarness) -> None:
    local.start("a-1")
    local.wait_running("a-1")
    alloc_dir = local.runtime.state_dir / "a-1"
    shim_record = shim_files.read_json(alloc_dir / shim_files.SHIM_RECORD)
    record = shim_files.read_json(alloc_dir / shim_files.WORKLOAD_RECORD)
    assert shim_record is not None and record is not None
    os.kill(shim_record["pid"], signal.SIGKILL)  # no shim: only the pid can answer
    wait_until(lambda: shim_files.process_start_ticks(shim_record["pid"]) is None)
    stranger = {**record, "start_ticks": record["start_ticks"] - 1}  # same pid, other process
    shim_files.write_json_atomic(alloc_dir / shim_files.WORKLOAD_RECORD, stranger)
    assert wait_phase(local.runtime, "a-1", "exited").exit_code is None
    local.runtime.kill("a-1")  # must not touch the "stranger"
    assert shim_files.process_start_ticks(record["pid"]) == record["start_ticks"]
    os.killpg(record["pid"], signal.SIGKILL)


def test_a_start_cut_short_by_a_crash_is_finished_by_the_next_start(
    local: LocalHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    def crash(*_: object) -> None:
        raise KeyboardInterrupt("the server died before launching the shim")

    monkeypatch.setattr(LocalRuntime, "_launch", crash)
    start = workload_start("a-1", local.argv("a-1"))
    with pytest.raises(KeyboardInterrupt):
        local.runtime.start(start)
    monkeypatch.undo()
    waiting = report_of(local.runtime, "a-1")
    assert waiting is not None and (waiting.phase, waiting.reason) == ("starting", RELAUNCH_REASON)
    local.another_runtime().start(start)
    local.wait_running("a-1")
    local.finish("a-1", 0)
    assert wait_phase(local.runtime, "a-1", "exited").exit_code == 0


def test_concurrent_starts_of_one_allocation_start_one_process(local: LocalHarness) -> None:
    start = workload_start("a-1", local.argv("a-1"))
    runtimes = [local.another_runtime() for _ in range(6)]
    threads = [threading.Thread(target=r.start, args=(start,)) for r in runtimes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    local.wait_running("a-1")
    assert local.process_count("a-1") == 1
    local.runtime.kill("a-1")
    wait_phase(local.runtime, "a-1", "exited")


def test_forget_drops_the_state_but_keeps_the_log(local: LocalHarness) -> None:
    local.start("a-1")
    local.wait_running("a-1")
    local.finish("a-1", 0)
    wait_phase(local.runtime, "a-1", "exited")
    local.runtime.forget("a-1")
    assert not (local.runtime.state_dir / "a-1").exists()
    assert "CUDA_VISIBLE_DEVICES=0,2" in local.runtime.logs("a-1")


@pytest.mark.parametrize(("sweep_at", "left"), [(3, 0), (4, 3)])
def test_a_start_reaps_ended_shims_only_once_they_have_piled_up(
    local: LocalHarness, monkeypatch: pytest.MonkeyPatch, sweep_at: int, left: int
) -> None:
    """A start sweeps the shims only when they reach the sweep mark (then twice as many), so a
    start costs O(1) however many workloads run; below the mark the loop's looks reap them."""
    monkeypatch.setattr(runtime_module, "_SWEEP_MIN_SHIMS", sweep_at)
    local.runtime._sweep_at = sweep_at
    for a in ("a-1", "a-2", "a-3"):
        local.start(a)
        local.wait_running(a)
    for a in ("a-1", "a-2", "a-3"):
        local.finish(a, 0)
    wait_until(lambda: len(local.new_zombies()) == 3, what="the three shims ended, unreaped")
    local.start("a-4")
    assert len(local.new_zombies()) == left
    local.wait_running("a-4")  # so that the harness's clean-up finds it to kill


def test_each_run_of_an_instance_keeps_its_own_log_after_a_restart(local: LocalHarness) -> None:
    """`logs --previous` / `--run N` read an earlier run: a restart (a new allocation) neither
    truncates nor appends to the log of the run before it, forgotten or not."""
    runs = ("i-7@100", "i-7@200.1")  # restart 0 and 1 of one instance (`allocation_id_for`)
    for restart, allocation_id in enumerate(runs):
        env = {"LOWCOSTGPU_INSTANCE_ID": f"run-{restart}"}
        local.start(allocation_id, restart_count=restart, env=env)
        local.wait_running(allocation_id)
        local.finish(allocation_id, 0)
        wait_phase(local.runtime, allocation_id, "exited")
        local.runtime.forget(allocation_id)
    first, second = (local.runtime.logs(a) for a in runs)
    assert first.count("LOWCOSTGPU_INSTANCE_ID=") == 1 and "=run-0\n" in first
    assert second.count("LOWCOSTGPU_INSTANCE_ID=") == 1 and "=run-1\n" in second
