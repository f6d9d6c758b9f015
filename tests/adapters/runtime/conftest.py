"""Harnesses that let one test suite drive real (LocalRuntime), Kubernetes (KubernetesRuntime on
a real kube-apiserver, the test playing the kubelet) and fake (FakeRuntime) workloads.

Every local test ends with no workload group left, no live shim, and no zombie child of the test
process: the fixture kills what a test left behind and then checks.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lowcostgpu.adapters.clock import FixedClock
from lowcostgpu.adapters.fakes import FakeRuntime
from lowcostgpu.adapters.files import load_catalog
from lowcostgpu.adapters.kubernetes import Kube, KubernetesRuntime
from lowcostgpu.adapters.kubernetes.objects import pod_name
from lowcostgpu.adapters.local import LocalRuntime
from lowcostgpu.adapters.local import shim as shim_files
from lowcostgpu.adapters.slurm import Slurm, SlurmRuntime
from lowcostgpu.adapters.store.memory import MemoryStore
from lowcostgpu.app.plane import PlaneConfig
from lowcostgpu.bootstrap.wiring import Wired, wire
from lowcostgpu.core.scheduler import SchedulerConfig
from lowcostgpu.domain.capacity import Host
from lowcostgpu.ports.runtime import VolumeMount, WorkloadReport, WorkloadStart
from waiting import wait_until

PROGRAM = Path(__file__).with_name("workload_program.py")
sys.path.insert(0, str(Path(__file__).parents[1] / "kubernetes"))  # apiserver.py, kubelet.py
MISSING_COMMAND = "/nonexistent/lowcostgpu-no-such-command"


def report_of(runtime: Any, allocation_id: str) -> WorkloadReport | None:
    return next((r for r in runtime.observe() if r.allocation_id == allocation_id), None)


def wait_phase(runtime: Any, allocation_id: str, phase: str) -> WorkloadReport:
    def found() -> WorkloadReport | None:
        r = report_of(runtime, allocation_id)
        return r if r is not None and r.phase == phase else None

    return wait_until(found, what=f"{allocation_id} {phase}")  # type: ignore[no-any-return]


def workload_start(allocation_id: str, argv: tuple[str, ...], **kw: Any) -> WorkloadStart:
    fields: dict[str, Any] = {
        "instance_id": f"i-{allocation_id}",
        "allocation_id": allocation_id,
        "host_id": "h-1",
        "gpu_indices": (0, 2),
        "restart_count": 0,
        "argv": argv,
    }
    fields.update(kw)
    return WorkloadStart(**fields)


class LocalHarness:
    """Real workloads: `workload_program.py`, driven through a control directory each."""

    name = "local"
    host_id = "h-1"

    def __init__(self, root: Path) -> None:
        self.root = root
        self.runtime = LocalRuntime(root / "state")
        self.others: list[LocalRuntime] = []
        self.zombies_before = set(zombie_children())

    def new_zombies(self) -> set[str]:
        """Zombie children of the test process that were not there when this harness was made:
        an earlier test in this process (another runtime, a demo's plane, pytest-xdist running
        the tests in any order) may have left its own, which no runtime of this test can reap."""
        return set(zombie_children()) - self.zombies_before

    def another_runtime(self) -> LocalRuntime:
        """A runtime on the same state directory (a restarted server); reaped at cleanup."""
        runtime = LocalRuntime(self.runtime.state_dir)
        self.others.append(runtime)
        return runtime

    def control(self, allocation_id: str) -> Path:
        path = self.root / "control" / allocation_id
        path.mkdir(parents=True, exist_ok=True)
        return path

    def argv(self, allocation_id: str, *extra: str) -> tuple[str, ...]:
        return (sys.executable, str(PROGRAM), str(self.control(allocation_id)), *extra)

    def start(self, allocation_id: str, *extra: str, **kw: Any) -> WorkloadStart:
        start = workload_start(allocation_id, self.argv(allocation_id, *extra), **kw)
        self.runtime.start(start)
        return start

    def wait_running(self, allocation_id: str) -> None:
        wait_phase(self.runtime, allocation_id, "running")
        wait_until(lambda: (self.control(allocation_id) / "ready").exists(), what="ready")

    def finish(self, allocation_id: str, exit_code: int) -> None:
        tmp = self.control(allocation_id) / "exit.tmp"
        tmp.write_text(str(exit_code))
        tmp.rename(self.control(allocation_id) / "exit")

    def got_sigterm(self, allocation_id: str) -> bool:
        marker = self.control(allocation_id) / "sigterm-main"
        wait_until(marker.exists, what="SIGTERM marker")
        return True

    def process_count(self, allocation_id: str) -> int:
        return len(processes_mentioning(str(self.control(allocation_id))))

    def cleanup(self) -> None:
        """Kill what a test left running, then check: no process, no shim, no zombie is left."""
        for alloc_dir in self.runtime.state_dir.iterdir():
            record = shim_files.read_json(alloc_dir / shim_files.WORKLOAD_RECORD)
            if record is not None and shim_files.process_start_ticks(record["pid"]):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(record["pid"], signal.SIGKILL)
        root = str(self.root)
        wait_until(lambda: not processes_mentioning(root), what="no process left")

        def reaped() -> bool:
            for runtime in (self.runtime, *self.others):
                runtime.observe()  # reaps the shims this runtime started that have ended
            return not self.new_zombies()

        wait_until(reaped, what="no zombie child of the test process")


class SlurmHarness(LocalHarness):
    """Real workloads as jobs of a real Slurm (the session's lab, `tests/slurm_lab.py`): the same
    program and control files as the local harness, on host `node1`, one GPU each by default."""

    name = "slurm"
    host_id = "node1"

    def __init__(self, root: Path) -> None:
        import slurm_lab

        self.root = root
        self.lab = slurm_lab.require()
        self.runtime = SlurmRuntime(Slurm(self.lab.conf), root / "slurm-state")  # type: ignore[assignment]
        self.others = []
        self.zombies_before = set(zombie_children())

    def another_runtime(self) -> SlurmRuntime:  # type: ignore[override]
        return SlurmRuntime(Slurm(self.lab.conf), self.runtime.state_dir)

    def start(self, allocation_id: str, *extra: str, **kw: Any) -> WorkloadStart:
        kw = {"host_id": self.host_id, "gpu_indices": (0,), **kw}
        return super().start(allocation_id, *extra, **kw)

    def process_count(self, allocation_id: str) -> int:
        """The workload's own processes (srun's command line names the control directory too)."""
        found = processes_mentioning(str(self.control(allocation_id)))
        return sum(1 for pid in found if not _cmdline(pid).startswith("srun"))

    def cleanup(self) -> None:
        """Cancel this test's jobs, then check that none of its processes is left."""
        ids = [j.job_id for j in self.runtime.slurm.jobs(self.runtime.partition)]  # type: ignore[attr-defined]
        mine = [
            (d / "job").read_text().strip()
            for d in self.runtime.state_dir.iterdir()
            if (d / "job").exists()
        ]
        for job_id in set(ids) & set(mine):
            self.runtime.slurm.cancel(job_id)  # type: ignore[attr-defined]
        root = str(self.root)
        wait_until(lambda: not processes_mentioning(root), deadline_s=30, what="no process left")


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


class FakeHarness:
    """Fake workloads: the test ends them through the fake's own controls."""

    name = "fake"
    host_id = "h-1"

    def __init__(self) -> None:
        self.runtime = FakeRuntime(missing_commands=[MISSING_COMMAND])

    def start(self, allocation_id: str, *extra: str, **kw: Any) -> WorkloadStart:
        start = workload_start(allocation_id, ("train", *extra), **kw)
        self.runtime.start(start)
        return start

    def wait_running(self, allocation_id: str) -> None:
        wait_phase(self.runtime, allocation_id, "running")

    def finish(self, allocation_id: str, exit_code: int) -> None:
        self.runtime.finish(allocation_id, exit_code)

    def got_sigterm(self, allocation_id: str) -> bool:
        return "SIGTERM" in self.runtime.signals_of(allocation_id)

    def process_count(self, allocation_id: str) -> int:
        return 1 if allocation_id in self.runtime.running() else 0

    def cleanup(self) -> None:
        pass


class KubernetesHarness:
    """Pods on a real API server, in a namespace of their own; the fake kubelet runs them."""

    name = "kubernetes"
    host_id = "h-1"

    def __init__(self, serial: int) -> None:
        from apiserver import register_host, require
        from kubelet import FakeKubelet

        server = require()
        self.kube = Kube.from_kubeconfig(server.kubeconfig)
        self.namespace = f"rt{os.getpid()}-{serial}"
        self.kube.core.create_namespace({"metadata": {"name": self.namespace}})
        register_host(self.kube.core, "h-1")  # the fleet's host
        self.runtime = KubernetesRuntime(self.kube, namespace=self.namespace)
        self.runtime.watch()  # the contract through the watch-fed cache (K8sWorld lists)
        self.kubelet = FakeKubelet(self.kube.api).start()

    def start(self, allocation_id: str, *extra: str, **kw: Any) -> WorkloadStart:
        start = workload_start(allocation_id, ("python", "train.py", *extra), **kw)
        self.runtime.start(start)
        return start

    def wait_running(self, allocation_id: str) -> None:
        wait_phase(self.runtime, allocation_id, "running")

    def finish(self, allocation_id: str, exit_code: int) -> None:
        self.kubelet.finish(self.namespace, pod_name(allocation_id), exit_code)

    def got_sigterm(self, allocation_id: str) -> bool:
        key = f"{self.namespace}/{pod_name(allocation_id)}"
        wait_until(lambda: key in self.kubelet.sigterm, what="SIGTERM of the pod")
        return True

    def process_count(self, allocation_id: str) -> int:
        pods = self.kube.core.list_namespaced_pod(self.namespace).items
        mine = [p for p in pods if p.metadata.name == pod_name(allocation_id)]
        return sum(1 for p in mine if p.status.phase in ("Pending", "Running"))

    def cleanup(self) -> None:
        self.kubelet.stop()
        self.runtime.close()
        assert not self.kubelet.errors, self.kubelet.errors
        self.kube.close()


_k8s_serial = iter(range(1, 10**6))


def processes_mentioning(text: str) -> list[int]:
    """Live processes (not zombies) whose command line contains `text`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        if text in cmdline and shim_files.process_start_ticks(int(entry)) is not None:
            found.append(int(entry))
    return found


def zombie_children() -> list[str]:
    me, zombies = os.getpid(), []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except (FileNotFoundError, ProcessLookupError):
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[0] == "Z" and int(fields[1]) == me:
            zombies.append(f"{entry} {stat[: stat.rindex(')') + 1]}")
    return zombies


@pytest.fixture
def local(tmp_path: Path) -> Iterator[LocalHarness]:
    harness = LocalHarness(tmp_path)
    yield harness
    harness.cleanup()


@pytest.fixture(params=["local", "fake", "kubernetes", "slurm"])
def harness(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[LocalHarness | FakeHarness | KubernetesHarness]:
    h: LocalHarness | FakeHarness | KubernetesHarness
    if request.param == "local":
        h = LocalHarness(tmp_path)
    elif request.param == "slurm":
        h = SlurmHarness(tmp_path)
    elif request.param == "fake":
        h = FakeHarness()
    else:
        h = KubernetesHarness(next(_k8s_serial))
    yield h
    h.cleanup()


class CountingIds:
    """Ids `i-0001`, `i-0002`…: readable in a failing test's output."""

    def __init__(self) -> None:
        self.n = 0

    def new_id(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}-{self.n:04d}"


def plane_on(
    runtime: Any, hosts: list[Host], store: MemoryStore, volumes: Any, clock: FixedClock
) -> Wired:
    """A control plane on a real runtime (the local one, or Slurm's), a memory store and
    `hosts`, with no minimum runtime: what the end-to-end tests on real processes drive."""
    return wire(
        store=store,
        runtime=runtime,
        volumes=volumes,
        clock=clock,
        ids=CountingIds(),
        hosts=hosts,
        catalog=load_catalog(),
        secret=b"0123456789abcdef0123456789abcdef",
        metadata_url="http://127.0.0.1:9/v1/metadata",
        config=PlaneConfig(scheduler=SchedulerConfig(min_runtime_s=0)),
    )


def volume_mount(path: Path) -> VolumeMount:
    path.mkdir(parents=True, exist_ok=True)
    return VolumeMount(name="ckpts", size_gb=1, path=str(path))
