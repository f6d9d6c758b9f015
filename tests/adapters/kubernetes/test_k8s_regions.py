"""One `lowcostgpu serve` over two Kubernetes clusters, one per region (`--kube-region`): each
pool's pods, claims and cluster nodes land in its region's cluster, a volume stays in the region
that holds its data, and after a restart calls about a run reach the cluster that runs it."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from apiserver import ApiServer, free_port, register_host
from kubelet import FakeKubelet
from serve_process import ServeProcess, fleet_file

from lowcostgpu.adapters.kubernetes import Kube
from lowcostgpu.adapters.kubernetes.names import DEFAULT_NAMES
from lowcostgpu.bootstrap.kubernetes import parse_kube_regions
from lowcostgpu.bootstrap.serve import ServeOptions, build
from lowcostgpu.domain.errors import ConfigError
from waiting import wait_until

CLUSTER_LABEL = DEFAULT_NAMES.cluster_label


@pytest.fixture(scope="module")
def us_east(k8s: ApiServer) -> Iterator[ApiServer]:
    """A second API server: the us-east cluster (the shared one is eu-west's)."""
    root = Path(tempfile.mkdtemp(prefix="lowcostgpu-k8s-us-east-"))
    server = ApiServer(root)
    server.start()
    yield server
    server.stop()
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def us_kube(us_east: ApiServer, namespace: str) -> Iterator[Kube]:
    client = Kube.from_kubeconfig(us_east.kubeconfig)
    client.core.create_namespace({"metadata": {"name": namespace}})
    yield client
    client.close()


@pytest.fixture
def us_kubelet(us_kube: Kube) -> Iterator[FakeKubelet]:
    fake = FakeKubelet(us_kube.api).start()
    yield fake
    fake.stop()


def pods(kube: Kube, namespace: str) -> dict[str, Any]:
    return {p.metadata.name: p for p in kube.core.list_namespaced_pod(namespace).items}


def claims(kube: Kube, namespace: str) -> list[str]:
    found = kube.core.list_namespaced_persistent_volume_claim(namespace).items
    return [c.metadata.name for c in found]


def test_each_region_runs_in_its_own_cluster_and_a_restarted_server_finds_its_runs(
    k8s: ApiServer,
    kube: Kube,
    us_east: ApiServer,
    us_kube: Kube,
    namespace: str,
    kubelet: FakeKubelet,
    us_kubelet: FakeKubelet,
    tmp_path: Path,
) -> None:
    eu = [f"gpu-{namespace}-eu-{n}" for n in (1, 2)]
    us = [f"gpu-{namespace}-us"]
    for host in eu:
        register_host(kube.core, host)
    register_host(us_kube.core, us[0])
    file = fleet_file(tmp_path / "fleet.toml", {"eu-west": eu, "us-east": us})
    serve = ServeProcess(tmp_path, [
        "--fleet", str(file), "--runtime", "kubernetes", "--namespace", namespace,
        "--kube-region", f"eu-west={k8s.kubeconfig}",
        "--kube-region", f"us-east={us_east.kubeconfig}",
    ])  # fmt: skip
    try:
        serve.start()
        account = serve.call("POST", "/v1/accounts", json={"name": "regions"})
        serve.call("POST", f"/v1/accounts/{account['id']}/topup", json={"amount": "100"})
        user = {"authorization": f"Bearer {account['api_key']}"}
        launch = {"gpu": "a100-sxm4", "type": "on-demand", "gpus": 8, "command": ["serve"]}
        launch["grace_period_s"] = 2  # the stop's SIGTERM, then the fake kubelet's 137

        # a run in us-east: its pod and its claim are us-east's cluster's, not eu-west's
        body = {**launch, "region": "us-east", "volume": "ckpts:10GB"}
        run = serve.call("POST", "/v1/instances", json=body, headers=user)
        pod = wait_until(lambda: next(iter(pods(us_kube, namespace).values()), None), 30)
        assert pod.spec.node_name == us[0] and pods(kube, namespace) == {}
        assert len(claims(us_kube, namespace)) == 1 and claims(kube, namespace) == []

        def status(instance: dict[str, Any]) -> str:
            found = serve.call("GET", f"/v1/instances/{instance['id']}", headers=user)
            return str(found["status"])

        wait_until(lambda: status(run) == "running", 30, "the us-east run running")

        # the volume's data is in us-east: a run in eu-west cannot mount it
        refused = serve.request(
            "POST", "/v1/instances", json={**body, "region": "eu-west"}, headers=user
        )
        assert refused.status_code == 422, refused.text
        assert "lives in region us-east" in refused.text and "--region us-east" in refused.text

        # a cluster in eu-west: its nodes are eu-west's Nodes
        cluster = serve.call(
            "POST",
            "/v1/clusters",
            json={"gpu": "a100-sxm4", "gpus_per_node": 8, "desired_preemptible_gpus": 8,
                  "region": "eu-west"},
            headers=user,
        )  # fmt: skip

        def labelled(k: Kube) -> set[str]:
            nodes = k.core.list_node(label_selector=f"{CLUSTER_LABEL}={cluster['id']}").items
            return {n.metadata.name for n in nodes}

        wait_until(lambda: labelled(kube) == set(eu), 30, "both eu-west hosts in the cluster")
        assert labelled(us_kube) == set()

        # a restart forgets which cluster runs what: the stop still reaches us-east's pod
        serve.kill9()
        serve.start()
        serve.call("POST", f"/v1/instances/{run['id']}/stop", headers=user)
        wait_until(lambda: status(run) == "stopped", 60, "the us-east run stopped")
        ours = lambda k: {key for key in k.sigterm if key.startswith(f"{namespace}/")}  # noqa: E731
        assert ours(us_kubelet) and not ours(kubelet)  # us-east's kubelet ended it
    finally:
        serve.stop()


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        (["eu-west=/etc/eu.kubeconfig"], {"eu-west": Path("/etc/eu.kubeconfig")}),
        ([" us-east = /a ", "eu-west=/b"], {"us-east": Path("/a"), "eu-west": Path("/b")}),
        (["eu-west"], "is not REGION=KUBECONFIG"),
        (["=/a"], "is not REGION=KUBECONFIG"),
        (["eu-west="], "is not REGION=KUBECONFIG"),
        (["eu-west=/a", "eu-west=/b"], "names region eu-west twice"),
    ],
)
def test_kube_region_values_are_region_equals_kubeconfig_each_region_once(
    values: list[str], expected: dict[str, Path] | str
) -> None:
    if isinstance(expected, str):
        with pytest.raises(ConfigError, match=expected):
            parse_kube_regions(values)
    else:
        assert parse_kube_regions(values) == expected


def test_a_fleet_region_no_cluster_serves_is_refused_at_start_naming_the_flag(
    k8s: ApiServer, kube: Kube, namespace: str, tmp_path: Path
) -> None:
    host = f"gpu-{namespace}-eu"
    register_host(kube.core, host)
    file = fleet_file(
        tmp_path / "fleet.toml", {"eu-west": [host], "us-east": [f"gpu-{namespace}-us"]}
    )
    options = ServeOptions(
        tmp_path / "data", fleet=file, runtime="kubernetes", namespace=namespace,
        kube_regions=(f"eu-west={k8s.kubeconfig}",), port=free_port(),
    )  # fmt: skip
    with pytest.raises(ConfigError, match=r"region\(s\) us-east, which no --kube-region") as info:
        build(options)
    assert "--kube-region us-east=KUBECONFIG" in (info.value.hint or "")


@pytest.mark.parametrize(
    ("runtime", "kubeconfig", "message"),
    [
        ("kubernetes", True, "--kubeconfig and --kube-region were both given"),
        ("local", False, "--kube-region needs --runtime kubernetes"),
    ],
)
def test_kube_region_with_kubeconfig_or_another_runtime_is_refused(
    k8s: ApiServer, tmp_path: Path, runtime: str, kubeconfig: bool, message: str
) -> None:
    options = ServeOptions(
        tmp_path / "data", runtime=runtime, kubeconfig=k8s.kubeconfig if kubeconfig else None,
        kube_regions=(f"eu-west={k8s.kubeconfig}",), port=free_port(),
    )  # fmt: skip
    with pytest.raises(ConfigError, match=message):
        build(options)
