"""`lowcostgpu serve --runtime kubernetes` is SIGKILLed in the middle of a node's drain; after
a restart the drain completes: pods evicted and gone, one `NodePreempted` Event, the host back in
the pool (its Node kept), and the on-demand work that reclaimed the node runs as a pod."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from apiserver import ApiServer, register_host
from k8s_world import GPU_LIMIT
from kubelet import FakeKubelet
from serve_process import ServeProcess, fleet_file

from lowcostgpu.adapters.kubernetes import Kube
from lowcostgpu.adapters.kubernetes.names import DEFAULT_NAMES
from waiting import wait_until

CLUSTER_LABEL, COMPUTE_CLASS_LABEL = DEFAULT_NAMES.cluster_label, DEFAULT_NAMES.compute_class_label
PREEMPTIBLE_TAINT = DEFAULT_NAMES.taint


@pytest.fixture
def serve(k8s: ApiServer, kube: Kube, namespace: str, tmp_path: Path) -> Any:
    hosts = [f"gpu-{namespace}-{n}" for n in (1, 2)]  # the standard node's and the preemptible's
    for host in hosts:
        register_host(kube.core, host)
    fleet = fleet_file(tmp_path / "fleet.toml", {"eu-west": hosts})
    argv = ["--fleet", str(fleet), "--runtime", "kubernetes"]
    server = ServeProcess(
        tmp_path, [*argv, "--kubeconfig", str(k8s.kubeconfig), "--namespace", namespace]
    )
    yield server
    server.stop()


def test_a_drain_interrupted_by_kill_9_completes_after_restart(
    serve: ServeProcess, kube: Kube, namespace: str, kubelet: FakeKubelet
) -> None:
    serve.start()
    account = serve.call("POST", "/v1/accounts", json={"name": "k8s"})
    serve.call("POST", f"/v1/accounts/{account['id']}/topup", json={"amount": "100"})
    user = {"authorization": f"Bearer {account['api_key']}"}
    body = {"gpu": "a100-sxm4", "gpus_per_node": 8, "desired_preemptible_gpus": 8}
    # Graces long enough that the kill lands mid-drain even on a loaded machine (train-0 still
    # runs, the node is still there), short enough for the drain to end soon after the restart.
    cluster = serve.call("POST", "/v1/clusters", json={**body, "grace_period_s": 20}, headers=user)
    selector = f"{CLUSTER_LABEL}={cluster['id']},{COMPUTE_CLASS_LABEL}=preemptible"

    def preemptible_node() -> Any:
        return next(iter(kube.core.list_node(label_selector=selector).items), None)

    node = wait_until(preemptible_node, 30, "the preemptible Node").metadata.name
    t = PREEMPTIBLE_TAINT
    for name, grace in (("train-0", 12), ("train-1", 2)):
        spec = {
            "nodeName": node,
            "terminationGracePeriodSeconds": grace,
            "tolerations": [{"key": t.key, "operator": "Exists", "effect": t.effect}],
            "containers": [{"name": "c", "image": "trainer", "resources": GPU_LIMIT}],
        }
        kube.core.create_namespaced_pod(namespace, {"metadata": {"name": name}, "spec": spec})
    wait_until(
        lambda: {"train-0", "train-1"} <= {n for n, w, _ in kubelet.log if w == "running"},
        what="both pods running",
    )

    launch = {"gpu": "a100-sxm4", "type": "on-demand", "gpus": 8, "command": ["serve"]}
    od = serve.call("POST", "/v1/instances", json={**launch, "grace_period_s": 2}, headers=user)
    wait_until(lambda: kube.core.read_node(node).spec.unschedulable, 30, "the cordon")
    serve.kill9()  # mid-drain: the pods have their grace to run, the node is still there
    assert kube.core.read_node(node).metadata.labels.get(CLUSTER_LABEL) == cluster["id"]
    left = {p.metadata.name for p in kube.core.list_namespaced_pod(namespace).items}
    assert "train-0" in left

    serve.start()

    def drained() -> bool:  # back in the pool: cordoned, none of the cluster's labels
        host = kube.core.read_node(node)
        return CLUSTER_LABEL not in (host.metadata.labels or {}) and bool(host.spec.unschedulable)

    wait_until(drained, 60, "the host back in the pool after the restart")

    def ended() -> bool:  # the kubelet's final delete and its records follow the status
        pods = {p.metadata.name for p in kube.core.list_namespaced_pod(namespace).items}
        exited = {n for n, w, _ in kubelet.log if w == "exited 137"}
        return not {"train-0", "train-1"} & pods and {"train-0", "train-1"} <= exited

    wait_until(ended, what="both pods exited with 137 and deleted")
    events = kube.events.list_namespaced_event("kube-system").items
    assert [e.regarding.name for e in events if e.reason == "NodePreempted"].count(node) == 1

    def od_running() -> bool:
        return serve.call("GET", f"/v1/instances/{od['id']}", headers=user)["status"] == "running"

    wait_until(od_running, 30, "the on-demand instance running")
