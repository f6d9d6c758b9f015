"""A real kube-apiserver + etcd on free loopback ports in a temporary directory.

The binary is built once from Debian's source package of Kubernetes 1.20.2 and cached outside the
repository (`.ci/services/kubernetes.sh`); etcd is Debian's `etcd-server`. TLS with a throw-away
CA, a static bearer token in `system:masters`, RBAC on; the ServiceAccount admission plugin is off
(no controller-manager runs to create service accounts). There is no kubelet, scheduler or
controller-manager: the tests play the kubelet (`kubelet.py`).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx

CACHE = Path(os.environ.get("LOWCOSTGPU_CACHE", Path.home() / ".cache" / "lowcostgpu"))
APISERVER = CACHE / "k8s" / "bin" / "kube-apiserver"
ETCD = Path(shutil.which("etcd") or "/usr/bin/etcd")
TOKEN = "lowcostgpu-test-admin-token"
NOBODY_TOKEN = "lowcostgpu-test-nobody-token"  # authenticated, no RBAC rights: 403s
READY_TIMEOUT_S = 60.0


def missing() -> str | None:
    """Why no apiserver can be started here (None: it can)."""
    if not APISERVER.exists():
        return f"no kube-apiserver at {APISERVER} (run .ci/services/kubernetes.sh)"
    if not ETCD.exists():
        return "no etcd (apt-get install etcd-server)"
    if shutil.which("openssl") is None:
        return "no openssl"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_pki(d: Path) -> None:
    d.mkdir(parents=True, exist_ok=True)
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out",
             "ca.crt", "-days", "2", "-subj", "/CN=lowcostgpu-test-ca", cwd=d)  # fmt: skip
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "apiserver.key", "-out",
             "apiserver.csr", "-subj", "/CN=kube-apiserver", cwd=d)  # fmt: skip
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    _openssl("x509", "-req", "-in", "apiserver.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
             "-CAcreateserial", "-out", "apiserver.crt", "-days", "2", "-extfile", "san.ext",
             cwd=d)  # fmt: skip
    _openssl("genrsa", "-out", "sa.key", "2048", cwd=d)
    _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=d)
    tokens = f"{TOKEN},admin,admin-uid,system:masters\n{NOBODY_TOKEN},nobody,nobody-uid\n"
    (d / "tokens.csv").write_text(tokens)


class ApiServer:
    """etcd + kube-apiserver; `kill_apiserver`/`start_apiserver` for outage tests."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.pki = root / "pki"
        self.port, self.etcd_port, self.peer_port = free_port(), free_port(), free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self.kubeconfig = root / "kubeconfig"
        self.etcd: subprocess.Popen[bytes] | None = None
        self.apiserver: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        make_pki(self.pki)
        self._write_kubeconfig()
        etcd_url, peer = f"http://127.0.0.1:{self.etcd_port}", f"http://127.0.0.1:{self.peer_port}"
        argv = [str(ETCD), "--name", "lcg", "--data-dir", str(self.root / "etcd")]
        argv += ["--listen-client-urls", etcd_url, "--advertise-client-urls", etcd_url]
        argv += ["--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer]
        argv += ["--initial-cluster", f"lcg={peer}", "--unsafe-no-fsync=true"]
        self.etcd = self._spawn(argv, "etcd.log")
        self.start_apiserver()

    def start_apiserver(self) -> None:
        p = self.pki
        argv = [str(APISERVER), f"--etcd-servers=http://127.0.0.1:{self.etcd_port}"]
        argv += ["--bind-address=127.0.0.1", "--advertise-address=127.0.0.1"]
        argv += [f"--secure-port={self.port}", "--insecure-port=0"]
        argv += [f"--tls-cert-file={p}/apiserver.crt", f"--tls-private-key-file={p}/apiserver.key"]
        argv += [f"--client-ca-file={p}/ca.crt", f"--token-auth-file={p}/tokens.csv"]
        argv += ["--authorization-mode=RBAC", f"--service-account-key-file={p}/sa.pub"]
        argv += [f"--service-account-signing-key-file={p}/sa.key"]
        argv += ["--service-account-issuer=https://kubernetes.default.svc.cluster.local"]
        argv += [
            "--service-cluster-ip-range=10.0.0.0/24",
            "--disable-admission-plugins=ServiceAccount",
        ]
        argv += ["--v=1"]
        self.apiserver = self._spawn(argv, "apiserver.log")
        self.wait_ready()

    def wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        headers = {"Authorization": f"Bearer {TOKEN}"}
        while time.monotonic() < deadline:
            try:
                r = httpx.get(
                    f"{self.url}/readyz",
                    headers=headers,
                    verify=str(self.pki / "ca.crt"),
                    timeout=2,
                )
                if r.status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            assert self.apiserver is not None and self.apiserver.poll() is None, self.log()
            time.sleep(0.25)
        raise AssertionError(f"kube-apiserver not ready after {READY_TIMEOUT_S} s:\n{self.log()}")

    def kill_apiserver(self) -> None:
        if self.apiserver is not None and self.apiserver.poll() is None:
            self.apiserver.send_signal(signal.SIGKILL)
            self.apiserver.wait()

    def stop(self) -> None:
        for proc in (self.apiserver, self.etcd):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()

    def log(self) -> str:
        path = self.root / "apiserver.log"
        return path.read_text()[-3000:] if path.exists() else ""

    def _spawn(self, argv: list[str], log_name: str) -> subprocess.Popen[bytes]:
        log = (self.root / log_name).open("ab")
        return subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )

    def write_kubeconfig(self, path: Path, *, token: str = TOKEN, url: str | None = None) -> Path:
        """A kubeconfig for this server (or for `url`), with `token` as its credential."""
        text = self.kubeconfig.read_text().replace(TOKEN, token)
        path.write_text(text.replace(self.url, url) if url else text)
        return path

    def _write_kubeconfig(self) -> None:
        self.kubeconfig.write_text(
            f"""apiVersion: v1
kind: Config
clusters:
- name: lcg
  cluster: {{server: "{self.url}", certificate-authority: {self.pki / "ca.crt"}}}
users:
- name: admin
  user: {{token: {TOKEN}}}
contexts:
- name: lcg
  context: {{cluster: lcg, user: admin}}
current-context: lcg
"""
        )


_shared: ApiServer | None = None


def shared() -> ApiServer:
    """One API server for the whole test session (runtime suite and Kubernetes tests alike),
    started at first use in a temporary directory and stopped when the session ends."""
    global _shared
    if _shared is None:
        import atexit
        import tempfile

        root = Path(tempfile.mkdtemp(prefix="lowcostgpu-k8s-"))
        server = ApiServer(root)
        atexit.register(server.stop)
        atexit.register(shutil.rmtree, root, True)
        server.start()
        _shared = server
    return _shared


def require() -> ApiServer:
    """The shared server; skipped on a laptop without one, a failure when CI=true."""
    import pytest

    why = missing()
    if why is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI needs a real kube-apiserver: {why}")
        pytest.skip(why)
    return shared()


def register_host(
    core: Any, name: str, gpus: int = 8, labels: dict[str, str] | None = None
) -> None:
    """A fleet host's Node, as its kubelet registers it and the NVIDIA device plugin advertises
    its GPUs (the test plays both; the hollow nodes of `components.py` are real kubelets)."""
    from kubernetes.client.exceptions import ApiException

    try:
        core.create_node({"metadata": {"name": name, "labels": labels or {}}})
    except ApiException as exc:
        if exc.status != 409:
            raise
    resources = {"nvidia.com/gpu": str(gpus), "cpu": "64", "memory": "512Gi", "pods": "110"}
    status = {"status": {"capacity": resources, "allocatable": resources}}
    core.patch_node_status(name, status)
