"""Real Kubernetes components around a real kube-apiserver: kube-scheduler,
kube-controller-manager, and kubemark hollow nodes (`--morph=kubelet`: the kubelet's own code,
with a fake container runtime and a fake cAdvisor), all v1.20.2 built by .ci/build-kubernetes.sh.

What the hollow node does (measured here, v1.20.2; see test_k8s_components.py):

- Capacity = allocatable: cpu 1, memory 3840Mi, pods 110, ephemeral-storage 0 (the fake cAdvisor).
- The kubelet's admission is real: a pod bound (nodeName) asking 9 GPUs of 8 ends Failed at once,
  reason OutOfnvidia.com/gpu ("Node didn't have enough resource: nvidia.com/gpu, requested: 9,
  used: 1, capacity: 8"); likewise OutOfcpu (2 CPUs) and OutOfmemory (4Gi).
- `nvidia.com/gpu` patched into status capacity+allocatable survived the kubelet's status syncs
  (still 8 after 12 s more); `DevicePlugin` re-patches if it ever goes.
- Delete with grace 5 of a pod still ContainerCreating: the object was gone 0.07 s later; with
  grace 0: gone at once (the API server removes it, no kubelet step). The fake runtime's
  StopContainer ignores the timeout and sets no exit code (0): grace is never waited out.
- NOT YET MEASURED: grace of a Running pod, exit code shown, eviction timings (see the report).
- Each hollow node: ≈ 77 MiB RSS, Ready (and not-ready taint lifted) ≈ 11 s after start, two in
  parallel. kube-scheduler ≈ 43 MiB, kube-controller-manager ≈ 82 MiB; both up ≈ 2.4 s after start
  (plus ≈ 8 s for the dedicated API server).
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import functools
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import httpx
from apiserver import CACHE, ApiServer, free_port
from apiserver import missing as apiserver_missing
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from lowcostgpu.adapters.kubernetes.objects import GPU_RESOURCE
from waiting import wait_until

T = TypeVar("T")
BIN = CACHE / "k8s" / "bin"
SCHEDULER = BIN / "kube-scheduler"
CONTROLLER_MANAGER = BIN / "kube-controller-manager"
KUBEMARK = BIN / "kubemark"
# What the harness needs and no more (2 cores): PDB status, Node health and taint eviction, the
# default ServiceAccount and its token, owner-based deletion, pods of deleted Nodes and
# namespaces cleaned up, ReplicaSets/Deployments for workloads that come back after a drain.
CONTROLLERS = (
    "disruption",
    "nodelifecycle",
    "serviceaccount",
    "serviceaccount-token",
    "garbagecollector",
    "podgc",
    "namespace",
    "replicaset",
    "deployment",
)
START_TIMEOUT_S = 60.0
NODE_READY_TIMEOUT_S = 60.0  # a hollow node is Ready in ~11 s on an idle machine
DEVICE_PLUGIN_POLL_S = 1.0
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
LOG_TAIL_CHARS = 3000


@functools.cache
def _can_unshare() -> bool:
    """Hollow nodes need a mount namespace each (see `HollowNode`): root with CAP_SYS_ADMIN."""
    if shutil.which("unshare") is None:
        return False
    argv = ["unshare", "--mount", "--propagation", "private", "true"]
    return subprocess.run(argv, capture_output=True).returncode == 0


def missing_components() -> str | None:
    """Why the scheduler, controller-manager and hollow nodes cannot run here (None: they can)."""
    why = apiserver_missing()
    if why is not None:
        return why
    for binary in (SCHEDULER, CONTROLLER_MANAGER, KUBEMARK):
        if not binary.exists():
            return f"no {binary.name} at {binary} (run .ci/build-kubernetes.sh)"
    if not _can_unshare():
        return (
            "`unshare --mount` is refused (needs root with CAP_SYS_ADMIN): each hollow node "
            "needs its own /tmp, kubemark's fake runtime listens on /tmp/kubelet_remote.sock"
        )
    return None


def wait_for(
    predicate: Callable[[], T | None], timeout_s: float, what: str, tail: Callable[[], str]
) -> T:
    """`waiting.wait_until`, its AssertionError followed by the components' log tails."""
    try:
        return wait_until(predicate, timeout_s, what, poll_s=0.1)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{tail()}") from None


class Process:
    """One component process, its output in `log`; `tail()` for assertion messages."""

    def __init__(self, name: str, argv: Sequence[str], log: Path) -> None:
        self.name, self.argv, self.log = name, list(argv), log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, env: dict[str, str] | None = None) -> Process:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                self.argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env
            )
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def check_alive(self) -> None:
        assert self.alive(), (
            f"{self.name} exited ({self.proc and self.proc.returncode}):\n{self.tail()}"
        )

    def stop(self, timeout_s: float = 10.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def rss_kib(self) -> int:
        """Resident memory of the process (kubemark: after `exec`, the same pid), from /proc."""
        if not self.alive() or self.proc is None:
            return 0
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        return 0

    def tail(self) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return f"--- {self.name} ({self.log}) ---\n{text[-LOG_TAIL_CHARS:]}"


def _healthy(port: int) -> bool:
    try:
        r = httpx.get(f"https://127.0.0.1:{port}/healthz", verify=False, timeout=2)
    except httpx.HTTPError:
        return False
    return r.status_code == 200 and r.text == "ok"


def _core(server: ApiServer) -> client.CoreV1Api:
    configuration = client.Configuration()
    config.load_kube_config(  # type: ignore[no-untyped-call]
        config_file=str(server.kubeconfig), client_configuration=configuration
    )
    return client.CoreV1Api(client.ApiClient(configuration))


class Components:
    """kube-scheduler and kube-controller-manager for one API server, and its hollow nodes.

    Both run on loopback with their insecure ports off and their secure ports on free ports,
    without leader election (one of each), as the server's admin. Logs in the server's folder."""

    def __init__(self, server: ApiServer) -> None:
        self.server = server
        self.root = server.root / "components"
        self.core = _core(server)
        self.scheduler_port, self.cm_port = free_port(), free_port()
        kc, pki = server.kubeconfig, server.pki
        common = [
            f"--kubeconfig={kc}",
            "--leader-elect=false",
            "--port=0",
            "--bind-address=127.0.0.1",
        ]
        common += [f"--authentication-kubeconfig={kc}", f"--authorization-kubeconfig={kc}"]
        self.scheduler = Process(
            "kube-scheduler",
            [str(SCHEDULER), *common, f"--secure-port={self.scheduler_port}",
             f"--cert-dir={self.root / 'scheduler-certs'}", "--v=1"],
            self.root / "kube-scheduler.log",
        )  # fmt: skip
        self.controller_manager = Process(
            "kube-controller-manager",
            [str(CONTROLLER_MANAGER), *common, f"--secure-port={self.cm_port}",
             f"--cert-dir={self.root / 'cm-certs'}", f"--controllers={','.join(CONTROLLERS)}",
             f"--service-account-private-key-file={pki / 'sa.key'}",
             f"--root-ca-file={pki / 'ca.crt'}", "--concurrent-gc-syncs=5", "--v=1"],
            self.root / "kube-controller-manager.log",
        )  # fmt: skip
        self.startup_s = 0.0

    def start(self) -> Components:
        began = time.monotonic()
        self.root.mkdir(parents=True, exist_ok=True)
        self.scheduler.start()
        self.controller_manager.start()
        self.wait(self._started, START_TIMEOUT_S, "kube-scheduler and kube-controller-manager")
        self.startup_s = time.monotonic() - began
        return self

    def _started(self) -> bool:
        """Both serve /healthz, and the controllers act: the default ServiceAccount (the
        serviceaccount controller) has its token Secret (the token controller)."""
        self.scheduler.check_alive()
        self.controller_manager.check_alive()
        if not (_healthy(self.scheduler_port) and _healthy(self.cm_port)):
            return False
        try:
            account = self.core.read_namespaced_service_account("default", "default")
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return bool(account.secrets)

    def stop(self) -> None:
        for process in (self.scheduler, self.controller_manager):
            process.stop()

    def tail(self) -> str:
        return f"{self.scheduler.tail()}\n{self.controller_manager.tail()}"

    def wait(self, predicate: Callable[[], T | None], timeout_s: float, what: str) -> T:
        return wait_for(predicate, timeout_s, what, self.tail)

    @contextmanager
    def hollow_nodes(
        self,
        names: Iterable[str],
        gpus: int,
        *,
        labels: dict[str, str] | None = None,
        taints: Sequence[str] = (),
    ) -> Iterator[list[HollowNode]]:
        """Hollow nodes `names` (started together), each Ready and advertising `gpus` GPUs;
        stopped and their Node objects deleted at the end. `taints`: "key=value:Effect"."""
        nodes = [HollowNode(self, n, gpus, labels or {}, taints) for n in names]
        plugin = DevicePlugin(self.core, nodes)
        try:
            for node in nodes:
                node.start()
            for node in nodes:
                node.wait_ready()
            plugin.start()
            for node in nodes:
                self.wait(node.advertises_gpus, NODE_READY_TIMEOUT_S, f"{node.name}'s GPUs")
            yield nodes
        finally:
            plugin.stop()
            for node in nodes:
                node.stop()


class HollowNode:
    """One kubemark hollow kubelet registering the Node `name`.

    kubemark's fake runtime listens on the fixed socket /tmp/kubelet_remote.sock (unlinked and
    re-made by each one that starts), so two hollow nodes on one machine would share the runtime
    of whichever started last. Each therefore runs in a mount namespace of its own whose /tmp is
    its own folder (the kubelet's root folder lands there too, as Go's temp dir); its kubeconfig,
    CA inlined, lies in that folder."""

    def __init__(
        self,
        components: Components,
        name: str,
        gpus: int,
        labels: dict[str, str],
        taints: Sequence[str],
    ) -> None:
        self.components, self.name, self.gpus = components, name, gpus
        self.dir = components.root / "nodes" / name
        self.port = free_port()
        argv = [str(KUBEMARK), "--morph=kubelet", f"--name={name}", "--kubeconfig=/tmp/kubeconfig"]
        argv += [f"--kubelet-port={self.port}", "--kubelet-read-only-port=0"]
        argv += ["--kube-api-content-type=application/json"]
        if labels:
            argv.append("--node-labels=" + ",".join(f"{k}={v}" for k, v in labels.items()))
        if taints:
            argv.append("--register-with-taints=" + ",".join(taints))
        mount = 'mount --bind "$0" /tmp && exec "$@"'
        namespaced = ["unshare", "--mount", "--propagation", "private", "sh", "-c", mount]
        self.process = Process(f"kubemark {name}", [*namespaced, str(self.dir), *argv],
                               components.root / f"kubemark-{name}.log")  # fmt: skip
        self.started_at = 0.0
        self.ready_s = 0.0

    def start(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir.mkdir(parents=True)
        self._write_kubeconfig(self.dir / "kubeconfig")
        self.started_at = time.monotonic()
        self.process.start(env={**os.environ, "TMPDIR": "/tmp"})

    def _write_kubeconfig(self, path: Path) -> None:
        server = self.components.server
        ca = base64.b64encode((server.pki / "ca.crt").read_bytes()).decode()
        text = server.kubeconfig.read_text()
        text = text.replace(f"certificate-authority: {server.pki / 'ca.crt'}",
                            f"certificate-authority-data: {ca}")  # fmt: skip
        assert "certificate-authority-data" in text, text
        path.write_text(text)

    def node(self) -> Any | None:
        try:
            return self.components.core.read_node(self.name)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def ready(self) -> bool:
        """Ready, and the node lifecycle controller has lifted the not-ready taint (until then
        the scheduler places nothing on it)."""
        self.process.check_alive()
        node = self.node()
        if node is None:
            return False
        conditions = node.status.conditions or []
        ready = any(c.type == "Ready" and c.status == "True" for c in conditions)
        return ready and not any(t.key == NOT_READY_TAINT for t in node.spec.taints or [])

    def wait_ready(self) -> None:
        wait_for(self.ready, NODE_READY_TIMEOUT_S, f"node {self.name} Ready", self.tail)
        self.ready_s = time.monotonic() - self.started_at

    def advertises_gpus(self) -> bool:
        node = self.node()
        if node is None:
            return False
        want = str(self.gpus)
        status = node.status
        return bool(
            (status.capacity or {}).get(GPU_RESOURCE) == want
            and (status.allocatable or {}).get(GPU_RESOURCE) == want
        )

    def stop(self) -> None:
        self.process.stop()
        try:
            self.components.core.delete_node(self.name)
        except ApiException as exc:
            if exc.status != 404:
                raise
        shutil.rmtree(self.dir, ignore_errors=True)

    def tail(self) -> str:
        return f"{self.process.tail()}\n{self.components.tail()}"


class DevicePlugin:
    """Stands in for the NVIDIA device plugin, which advertises a Node's GPUs through its
    kubelet: patches `nvidia.com/gpu` into each Node's status capacity and allocatable, and
    again whenever it is missing (a kubelet that re-registers zeroes extended resources)."""

    def __init__(self, core: client.CoreV1Api, nodes: Sequence[HollowNode]) -> None:
        self.core, self.nodes = core, nodes
        self.patches: dict[str, int] = {n.name: 0 for n in nodes}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="device-plugin", daemon=True)

    def start(self) -> None:
        self.advertise()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def advertise(self) -> None:
        for node in self.nodes:
            if node.process.alive() and not node.advertises_gpus():
                gpus = {GPU_RESOURCE: str(node.gpus)}
                body = {"status": {"capacity": gpus, "allocatable": gpus}}
                self.core.patch_node_status(node.name, body)
                self.patches[node.name] += 1

    def _run(self) -> None:
        while not self._stop.wait(DEVICE_PLUGIN_POLL_S):
            with contextlib.suppress(ApiException):  # a Node being deleted, a conflict: retried
                self.advertise()


_shared: Components | None = None


def shared_components() -> Components:
    """This worker's components, on an API server of their own, started at first use and stopped
    when the session ends.

    Not on `apiserver.shared()`: the other Kubernetes tests play scheduler, kubelet and
    controllers themselves on that one, with Node objects no kubelet backs and pods left pending
    on purpose; a real scheduler would bind those pods, the node lifecycle controller would taint
    those Nodes unreachable and evict, the disruption controller would answer their PDBs."""
    global _shared
    if _shared is None:
        root = Path(tempfile.mkdtemp(prefix="lowcostgpu-k8s-components-"))
        server = ApiServer(root)
        atexit.register(shutil.rmtree, root, True)
        atexit.register(server.stop)
        server.start()
        components = Components(server)
        atexit.register(components.stop)  # atexit runs last-registered first: before the server
        components.start()
        _shared = components
    return _shared


def require_components() -> Components:
    """The shared components; skipped on a laptop without them, a failure when CI=true."""
    import pytest

    why = missing_components()
    if why is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI needs kube-scheduler, kube-controller-manager and kubemark: {why}")
        pytest.skip(why)
    return shared_components()
