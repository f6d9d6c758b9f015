"""Bad input against Kubernetes gives a clear domain error that says what to do, no traceback:
a pod that can never land, a bad kubeconfig, an unreachable or refusing API server."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from apiserver import NOBODY_TOKEN, ApiServer, free_port
from k8s_world import K8sWorld

from lowcostgpu.adapters.kubernetes import Kube, KubernetesRuntime
from lowcostgpu.adapters.kubernetes.names import DEFAULT_NAMES
from lowcostgpu.domain.errors import (
    ConfigError,
    Forbidden,
    InvalidRequest,
    NotFound,
    Unavailable,
)
from lowcostgpu.ports.runtime import WorkloadStart
from waiting import wait_until

CLUSTER_LABEL, COMPUTE_CLASS_LABEL = DEFAULT_NAMES.cluster_label, DEFAULT_NAMES.compute_class_label
PREEMPTIBLE_TAINT = DEFAULT_NAMES.taint


def pending_pod(world: K8sWorld, name: str, selector: dict[str, str], tolerate: bool) -> None:
    t = PREEMPTIBLE_TAINT
    spec: dict[str, object] = {
        "nodeSelector": selector,
        "containers": [{"name": "c", "image": "trainer"}],
    }
    if tolerate:
        spec["tolerations"] = [{"key": t.key, "operator": "Exists", "effect": t.effect}]
    world.kube.core.create_namespaced_pod(
        world.namespace, {"metadata": {"name": name}, "spec": spec}
    )


@pytest.mark.parametrize(
    ("compute_class", "tolerate", "refused"),
    [
        ("preemptible", False, True),  # only preemptible nodes match, no toleration: never lands
        ("preemptible", True, False),
        ("standard", False, False),  # critical components: standard nodes, no toleration needed
    ],
)
def test_a_pod_that_cannot_tolerate_the_only_matching_nodes_is_refused_with_what_to_do(
    kube: Kube, namespace: str, compute_class: str, tolerate: bool, refused: bool
) -> None:
    world = K8sWorld(kube, namespace, hosts=2)
    c = world.cluster(desired=8)
    world.plane.tick()
    selector = {CLUSTER_LABEL: c, COMPUTE_CLASS_LABEL: compute_class}
    pending_pod(world, "job", selector, tolerate)
    if not refused:
        world.nodes.check_pod(namespace, "job")
        return
    with pytest.raises(InvalidRequest) as caught:
        world.nodes.check_pod(namespace, "job")
    assert (
        "does not tolerate" in caught.value.message
        and str(PREEMPTIBLE_TAINT) in caught.value.message
    )
    assert caught.value.hint and "toleration" in caught.value.hint
    world.plane.tick()  # the loop explains it on the pod itself, as a Warning Event

    def warned() -> list[object]:
        events = kube.events.list_namespaced_event(namespace).items
        return [e for e in events if e.regarding.name == "job" and e.type == "Warning"]

    (event,) = wait_until(warned, what="the Warning event on the pod")
    assert event.reason == "PreemptibleTaintNotTolerated" and "toleration" in event.note


def test_a_pod_selecting_a_cluster_with_no_such_nodes_is_refused(
    kube: Kube, namespace: str
) -> None:
    world = K8sWorld(kube, namespace)
    world.cluster(desired=0)
    world.plane.tick()
    pending_pod(world, "job", {COMPUTE_CLASS_LABEL: "preemptible", CLUSTER_LABEL: "c-none"}, True)
    with pytest.raises(InvalidRequest, match="no schedulable node"):
        world.nodes.check_pod(namespace, "job")


def test_a_host_that_is_no_node_fails_the_start_with_the_fix(kube: Kube, namespace: str) -> None:
    runtime = KubernetesRuntime(kube, namespace=namespace)
    start = WorkloadStart("i-1", "i-1@1", "no-such-host", (0,), 0, ("train",))
    with pytest.raises(NotFound, match="no-such-host") as caught:
        runtime.start(start)
    assert caught.value.hint and "kubectl get nodes" in caught.value.hint


@pytest.mark.parametrize(
    "content",
    [None, "", "clusters: [oops\n", "apiVersion: v1\nkind: Config\ncurrent-context: gone\n"],
    ids=["missing", "empty", "not-yaml", "no-such-context"],
)
def test_a_bad_kubeconfig_is_a_config_error(tmp_path: Path, content: str | None) -> None:
    path = tmp_path / "kubeconfig"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ConfigError, match="cannot use the kubeconfig") as caught:
        Kube.from_kubeconfig(path)
    assert caught.value.hint and "--kubeconfig" in caught.value.hint


def test_an_unreachable_server_is_unavailable_with_what_to_check(
    k8s: ApiServer, tmp_path: Path
) -> None:
    url = f"https://127.0.0.1:{free_port()}"  # nothing listens there
    kube = Kube.from_kubeconfig(k8s.write_kubeconfig(tmp_path / "kc", url=url), timeout_s=3)
    with pytest.raises(Unavailable, match="cannot reach the Kubernetes API server") as caught:
        KubernetesRuntime(kube).observe()
    assert caught.value.hint and "--kubeconfig" in caught.value.hint


def test_a_user_without_rights_gets_forbidden_naming_the_rights(
    k8s: ApiServer, tmp_path: Path
) -> None:
    kube = Kube.from_kubeconfig(k8s.write_kubeconfig(tmp_path / "kc", token=NOBODY_TOKEN))
    with pytest.raises(Forbidden, match="forbidden") as caught:
        KubernetesRuntime(kube).observe()
    assert caught.value.hint and "pods/eviction" in caught.value.hint


@pytest.mark.parametrize("problem", ["missing-file", "unreachable", "no-namespace"])
def test_serve_says_what_is_wrong_in_one_line_without_a_traceback(
    k8s: ApiServer, tmp_path: Path, problem: str
) -> None:
    namespace = "default"
    if problem == "missing-file":
        kubeconfig, words = tmp_path / "nope", "cannot use the kubeconfig"
    elif problem == "no-namespace":
        kubeconfig, namespace = k8s.kubeconfig, "no-such-namespace"
        words = "namespace no-such-namespace does not exist"
    else:
        url = f"https://127.0.0.1:{free_port()}"
        kubeconfig = k8s.write_kubeconfig(tmp_path / "kc", url=url)
        words = "cannot reach the Kubernetes API server"
    argv = [sys.executable, "-m", "lowcostgpu", "serve", "--data-dir", str(tmp_path / "data")]
    argv += ["--runtime", "kubernetes", "--kubeconfig", str(kubeconfig), "--namespace", namespace]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert words in done.stdout + done.stderr and "Traceback" not in done.stdout + done.stderr
    assert not (tmp_path / "data").exists()  # refused before any state was written


def test_a_stale_write_is_a_409_conflict_read_again_and_retried(kube: Kube, namespace: str) -> None:
    kube.core.create_namespaced_config_map(namespace, {"metadata": {"name": "cm"}})
    stale = kube.core.read_namespaced_config_map("cm", namespace).metadata.resource_version
    kube.core.patch_namespaced_config_map("cm", namespace, {"data": {"someone": "else"}})
    versions: list[str] = []

    def attempt() -> None:
        fresh = kube.core.read_namespaced_config_map("cm", namespace).metadata.resource_version
        versions.append(stale if not versions else fresh)  # the first try writes on a stale read
        body = {"metadata": {"resourceVersion": versions[-1]}, "data": {"mine": "1"}}
        kube.call(kube.core.patch_namespaced_config_map, "cm", namespace, body,
                  _content_type="application/merge-patch+json", what="a write")  # fmt: skip

    kube.retry_conflicts(attempt, what="a write")
    assert versions[0] == stale and len(versions) == 2
    assert kube.core.read_namespaced_config_map("cm", namespace).data == {
        "someone": "else",
        "mine": "1",
    }


def test_logs_without_a_kubelet_to_serve_them_are_unavailable_not_a_traceback(
    kube: Kube, namespace: str
) -> None:
    world = K8sWorld(kube, namespace)
    world.runtime.start(WorkloadStart("i-1", "i-1@1", world.host, (0,), 0, ("train",)))
    with pytest.raises(Unavailable, match="cannot be read now") as caught:
        world.runtime.logs("i-1@1")
    assert caught.value.hint and "kubelet" in caught.value.hint


def test_the_log_of_a_run_whose_pod_is_gone_is_not_found_saying_only_the_latest_is_kept(
    kube: Kube, namespace: str
) -> None:
    """`logs --previous` on Kubernetes: an earlier run's pod was deleted once it ended, and its
    log with it; the error says so rather than "no workload"."""
    world = K8sWorld(kube, namespace)
    with pytest.raises(NotFound, match="is gone, and its log with it") as caught:
        world.runtime.logs("i-1@1")
    assert caught.value.hint and "only the latest run's log is kept there" in caught.value.hint
