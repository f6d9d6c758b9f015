"""`serve --in-cluster` (deploy/kubernetes/deployment.yaml): the server in a pod drives the
cluster it runs in, with the ServiceAccount token and CA the kubelet mounts, and the API
server's address the kubelet puts in the environment."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from apiserver import TOKEN, ApiServer, free_port, register_host

from lowcostgpu.adapters.kubernetes import Kube, KubernetesRuntime
from lowcostgpu.bootstrap.serve import ServeOptions, build
from lowcostgpu.domain.errors import ConfigError


def mounted_account(root: Path, k8s: ApiServer, token: str = TOKEN) -> Path:
    """What the kubelet mounts at /var/run/secrets/kubernetes.io/serviceaccount."""
    account = root / "serviceaccount"
    account.mkdir()
    (account / "token").write_text(token)
    shutil.copy(k8s.pki / "ca.crt", account / "ca.crt")
    return account


def options(tmp: Path, namespace: str, host: str, **kw: object) -> ServeOptions:
    fleet = tmp / "fleet.toml"
    fleet.write_text(
        f'[[region]]\nname = "eu-west"\n  [[region.hosts]]\n  name = "{host}"\n'
        '  gpu_type = "a100-sxm4"\n  gpus = 8\n'
    )
    return ServeOptions(
        tmp / "data", fleet=fleet, runtime="kubernetes", namespace=namespace, port=free_port(),
        **kw,  # type: ignore[arg-type]
    )  # fmt: skip


def test_in_cluster_reaches_the_api_server_as_the_pods_service_account(
    k8s: ApiServer, kube: Kube, namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    host = f"gpu-{namespace}"
    register_host(kube.core, host)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(k8s.port))
    account = mounted_account(tmp_path, k8s)
    wired, _, runtime = build(
        options(tmp_path, namespace, host, in_cluster=True, service_account_dir=account)
    )
    try:
        assert isinstance(runtime, KubernetesRuntime)
        assert runtime.kube.server == k8s.url
        assert runtime.observe() == []  # a real call, with the mounted token
    finally:
        runtime.close()
        wired.plane.store.close()


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({}, "cannot use the in-cluster configuration"),  # not in a pod: no service address
        ({"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": "1"}, "token"),
    ],
)
def test_in_cluster_outside_a_pod_is_a_clear_error_naming_kubeconfig(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, env: dict[str, str], message: str
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_PORT", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    opts = options(tmp_path, "default", "gpu-x", in_cluster=True,
                   service_account_dir=tmp_path / "none")  # fmt: skip
    with pytest.raises(ConfigError, match=message) as info:
        build(opts)
    assert "--kubeconfig" in (info.value.hint or "")


def test_in_cluster_with_a_kubeconfig_is_refused(k8s: ApiServer, tmp_path: Path) -> None:
    opts = options(tmp_path, "default", "gpu-x", in_cluster=True, kubeconfig=k8s.kubeconfig)
    with pytest.raises(ConfigError, match="--kubeconfig and --in-cluster were both given"):
        build(opts)
