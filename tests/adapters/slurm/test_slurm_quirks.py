"""Slurm's quirks that the Slurm runtime must not pass on to users, on a real Slurm (the session's
lab): a job that exits inside its grace is an interruption and runs again (Slurm would call it
COMPLETED and never requeue it); a requeued run starts at once (Slurm's own requeue holds a job
for `cred_expire` + 1 s, 121 s by default); `scancel` racing a job's end is harmless; a signal
to a job still waiting for its host cancels it; a start replayed after a crash finds its job."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import slurm_lab
from lowcostgpu.adapters.clock import RandomIds, SystemClock
from lowcostgpu.adapters.fakes import FakeVolumes
from lowcostgpu.adapters.files import load_catalog
from lowcostgpu.adapters.slurm import Slurm, SlurmRuntime
from lowcostgpu.adapters.store.memory import MemoryStore
from lowcostgpu.app.launch import LaunchRequest
from lowcostgpu.app.plane import PlaneConfig
from lowcostgpu.bootstrap.wiring import Wired, wire
from lowcostgpu.core.scheduler import SchedulerConfig
from lowcostgpu.domain.capacity import Host, PoolKey
from lowcostgpu.domain.errors import Unavailable
from lowcostgpu.domain.status import InstanceStatus
from lowcostgpu.ports.runtime import WorkloadReport, WorkloadStart
from waiting import wait_until

PROGRAM = Path(__file__).parents[1] / "runtime" / "workload_program.py"
CRED_EXPIRE_S = 120  # Slurm's default, which the lab keeps: a requeued job waits this + 1 s


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[SlurmRuntime]:
    lab = slurm_lab.require()
    rt = SlurmRuntime(Slurm(lab.conf), tmp_path / "state")
    yield rt
    for d in rt.state_dir.iterdir():
        if (d / "job").exists():
            rt.slurm.cancel((d / "job").read_text().strip())


@pytest.fixture
def plane(runtime: SlurmRuntime) -> Wired:
    return wire(
        store=MemoryStore(),
        runtime=runtime,
        volumes=FakeVolumes(),
        clock=SystemClock(),
        ids=RandomIds(),
        hosts=[Host("node3", PoolKey("eu-west", "a100-sxm4"), slurm_lab.GPUS)],
        catalog=load_catalog(),
        secret=b"0123456789abcdef0123456789abcdef",
        metadata_url="http://127.0.0.1:9/v1/metadata",
        config=PlaneConfig(scheduler=SchedulerConfig(min_runtime_s=0)),
    )


def _argv(control: Path) -> tuple[str, ...]:
    control.mkdir(parents=True, exist_ok=True)
    return (sys.executable, str(PROGRAM), str(control))


def _report(runtime: SlurmRuntime, allocation_id: str) -> WorkloadReport | None:
    return next((r for r in runtime.observe() if r.allocation_id == allocation_id), None)


def _start(runtime: SlurmRuntime, allocation_id: str, argv: tuple[str, ...], gpus: int = 1) -> None:
    runtime.start(
        WorkloadStart(f"i-{allocation_id}", allocation_id, "node2", tuple(range(gpus)), 0, argv)
    )


def test_a_run_that_exits_inside_its_grace_is_interrupted_and_runs_again_at_once(
    plane: Wired, runtime: SlurmRuntime, tmp_path: Path
) -> None:
    p, store = plane.plane, plane.plane.store
    control = tmp_path / "victim"
    victim = p.launch(
        LaunchRequest("acme", "a100-sxm4", "interruptible", 4, command=_argv(control))
    ).state.id

    def status(instance_id: str) -> InstanceStatus:
        p.tick()
        return store.instance(instance_id).state.status

    wait_until(lambda: status(victim) is InstanceStatus.RUNNING and (control / "ready").exists())
    od_control = tmp_path / "od"
    od = p.launch(LaunchRequest("acme", "a100-sxm4", "on-demand", 4, command=_argv(od_control)))
    wait_until((control / "sigterm-main").exists, what="the victim's SIGTERM")
    for marker in ("ready", "sigterm-main"):
        (control / marker).unlink()
    (control / "exit").write_text("0")  # it saved and exits at once, well inside its grace
    wait_until(lambda: status(od.state.id) is InstanceStatus.RUNNING, what="on-demand running")
    assert status(victim) is InstanceStatus.QUEUED  # an interruption, never "succeeded"
    (control / "exit").unlink()
    (od_control / "exit").write_text("0")
    freed = time.time()
    wait_until(lambda: status(victim) is InstanceStatus.RUNNING and (control / "ready").exists())
    assert time.time() - freed < CRED_EXPIRE_S + 1  # a new job: no cred_expire hold
    current = store.instance(victim).state.allocation_id
    assert current is not None
    spec = json.loads((runtime.state_dir / current / "spec.json").read_text())
    assert spec["restart_count"] == 1
    jobs = [j for j in runtime.slurm.jobs(runtime.partition) if f"-{victim}@" in j.name]
    assert len({j.job_id for j in jobs}) == 2  # two runs: two Slurm jobs on the same host
    (control / "exit").write_text("0")
    wait_until(lambda: status(victim) is InstanceStatus.SUCCEEDED, what="the victim finished")


def test_signals_racing_a_jobs_end_are_harmless_and_keep_its_exit_code(
    runtime: SlurmRuntime,
) -> None:
    _start(runtime, "race", ("sh", "-c", "trap '' TERM; sleep 1; exit 5"))
    wait_until(lambda: (r := _report(runtime, "race")) is not None and r.phase == "running")

    def signalled_until_exited() -> WorkloadReport | None:
        runtime.signal("race", "SIGTERM")  # never raises, whether the job runs, ends or ended
        r = _report(runtime, "race")
        return r if r is not None and r.phase == "exited" else None

    exited = wait_until(signalled_until_exited, poll_s=0.02, what="the job's own end")
    runtime.kill("race")
    runtime.signal("race", "SIGTERM")
    assert exited.exit_code == 5
    assert _report(runtime, "race") == exited


def test_a_signal_to_a_job_still_waiting_for_its_host_cancels_it(
    runtime: SlurmRuntime, tmp_path: Path
) -> None:
    hog = tmp_path / "hog"
    _start(runtime, "hog", _argv(hog), gpus=slurm_lab.GPUS)
    wait_until((hog / "ready").exists, what="the host's GPUs all taken")
    waiting = tmp_path / "waiting"
    _start(runtime, "waiting", _argv(waiting))
    pending = wait_until(lambda: _report(runtime, "waiting"), what="a report of the waiting job")
    assert pending.phase == "starting" and "pending" in pending.reason
    runtime.signal("waiting", "SIGTERM")
    exited = wait_until(
        lambda: (r := _report(runtime, "waiting")) is not None and r.phase == "exited" and r
    )
    assert exited.exit_code == 143 and "CANCELLED" in exited.reason
    assert not (waiting / "ready").exists()  # it never ran
    runtime.kill("hog")
    wait_until(lambda: (r := _report(runtime, "hog")) is not None and r.phase == "exited")


def test_a_start_replayed_after_a_crash_finds_its_job_instead_of_submitting_again(
    runtime: SlurmRuntime, tmp_path: Path
) -> None:
    _start(runtime, "replay", _argv(tmp_path / "replay"))
    job_file = runtime.state_dir / "replay" / "job"
    first = job_file.read_text()
    job_file.unlink()  # as if the server died between sbatch and recording the job id
    _start(runtime, "replay", _argv(tmp_path / "replay"))
    assert job_file.read_text() == first
    named = [j for j in runtime.slurm.jobs(runtime.partition) if j.name.endswith("-replay")]
    assert [j.job_id for j in named] == [first.strip()]
    runtime.kill("replay")


def test_an_unreachable_slurmctld_is_a_clear_unavailable_error(tmp_path: Path) -> None:
    lab = slurm_lab.require()
    conf = tmp_path / "slurm.conf"
    text = lab.conf.read_text()
    port = next(line for line in text.splitlines() if line.startswith("SlurmctldPort="))
    conf.write_text(text.replace(port, "SlurmctldPort=9"))
    for name in ("gres.conf", "cgroup.conf"):
        (tmp_path / name).write_text((lab.root / name).read_text())
    slurm = Slurm(conf, timeout_s=20)
    with pytest.raises(Unavailable, match="slurmctld") as caught:
        slurm.jobs("lowcostgpu")
    assert caught.value.hint is not None and "scontrol ping" in caught.value.hint


def test_an_exit_while_no_server_watched_is_found_by_the_next_one(
    runtime: SlurmRuntime, tmp_path: Path
) -> None:
    control = tmp_path / "alone"
    _start(runtime, "alone", _argv(control))
    wait_until((control / "ready").exists, what="the workload up")
    (control / "exit").write_text("7")  # the server is gone: nobody observes the exit
    successor = SlurmRuntime(runtime.slurm, runtime.state_dir)
    exited = wait_until(
        lambda: (r := _report(successor, "alone")) is not None and r.phase == "exited" and r
    )
    assert exited.exit_code == 7 and exited.instance_id == "i-alone"


def test_a_job_ended_behind_our_back_is_reported_exited_with_slurms_reason(
    runtime: SlurmRuntime, tmp_path: Path
) -> None:
    control = tmp_path / "cancelled"
    _start(runtime, "cancelled", _argv(control))
    wait_until((control / "ready").exists, what="the workload up")
    job_id = (runtime.state_dir / "cancelled" / "job").read_text().strip()
    runtime.slurm.run(["scancel", "--full", "--signal=KILL", job_id], what="an operator's scancel")
    exited = wait_until(
        lambda: (r := _report(runtime, "cancelled")) is not None and r.phase == "exited" and r
    )
    assert exited.exit_code is None  # not ours to guess: the core counts it a failure
    assert f"Slurm job {job_id} ended" in exited.reason
    assert "without an exit record" in exited.reason
