"""The Kubernetes adapters run as the ServiceAccount of `deploy/kubernetes/rbac.yaml`, bound to
exactly that file's roles, not as the admin (system:masters) of the other tests: the whole
cluster-node story (roles; a reclaim's drain of a user's pods in their own namespace, with its
Events; a PDB held until the deadline; a pending pod's Warning), an instance's pod and Secret, the
server's start checks and a volume claim all work with those rights, no call on the way is
refused, and what the file says is never granted is refused, as are the rights the code never
uses (the file grants exactly what it calls).

The file's objects are created by the admin with the test's namespaces in place of
`lowcostgpu-system` and `lowcostgpu-workloads`, and a per-test suffix on the cluster-scoped
names (parallel workers share one API server); the rules are the file's own. The token comes
from the TokenRequest API, as the kubelet projects one into the server's pod. The fake kubelet
and the users' pods are the admin's.
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from apiserver import ApiServer, register_host
from k8s_world import K8sWorld, create_pdb, user_pod_body
from kubelet import FakeKubelet
from kubernetes import client, utils
from test_k8s_drain import ours, tick_until

from lowcostgpu.adapters.kubernetes import Kube, KubernetesVolumes
from lowcostgpu.domain.errors import Forbidden, InvalidRequest, Unavailable
from lowcostgpu.domain.status import InstanceStatus
from waiting import wait_until

MANIFEST = Path(__file__).parents[3] / "deploy" / "kubernetes" / "rbac.yaml"
SYSTEM, WORKLOADS = "lowcostgpu-system", "lowcostgpu-workloads"  # the file's namespaces
CLUSTER_SCOPED = ("ClusterRole", "ClusterRoleBinding")


@dataclass
class Deployed:
    """rbac.yaml applied for one test: the ServiceAccount's client and the namespaces."""

    sa: Kube
    system: str
    workloads: str
    user: str  # a user's namespace: their pods land on cluster nodes, not ours to write


def manifests() -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(MANIFEST.read_text()) if doc]


def localized(doc: dict[str, Any], system: str, workloads: str, suffix: str) -> dict[str, Any]:
    """`doc` with the test's namespaces and a suffix on cluster-scoped names; its rules the
    file's, but for the workloads namespace's own name where a rule names it."""
    doc = copy.deepcopy(doc)
    where = {SYSTEM: system, WORKLOADS: workloads}
    meta = doc["metadata"]
    if "namespace" in meta:
        meta["namespace"] = where[meta["namespace"]]
    if doc["kind"] in CLUSTER_SCOPED:
        meta["name"] += suffix
    if doc["kind"] == "ClusterRoleBinding":
        doc["roleRef"]["name"] += suffix
    for subject in doc.get("subjects", []):
        subject["namespace"] = where[subject["namespace"]]
    for rule in doc.get("rules", []):
        if rule.get("resources") == ["namespaces"]:
            rule["resourceNames"] = [where[n] for n in rule["resourceNames"]]
    return doc


def service_account_token(kube: Kube, namespace: str, name: str) -> str:
    """A bound token of the ServiceAccount (TokenRequest), as the kubelet projects into pods."""
    request = {"spec": {"expirationSeconds": 3600}}
    token = kube.core.create_namespaced_service_account_token(name, namespace, request)
    return str(token.status.token)


@pytest.fixture
def deployed(k8s: ApiServer, kube: Kube, namespace: str, tmp_path: Path) -> Iterator[Deployed]:
    system, user = f"{namespace}-sys", f"{namespace}-user"
    for ns in (system, user):
        kube.core.create_namespace({"metadata": {"name": ns}})
    docs = [localized(d, system, namespace, f"-{namespace}") for d in manifests()]
    for doc in docs:
        utils.create_from_dict(kube.api, doc)
    (account,) = [d["metadata"]["name"] for d in docs if d["kind"] == "ServiceAccount"]
    token = service_account_token(kube, system, account)
    sa = Kube.from_kubeconfig(k8s.write_kubeconfig(tmp_path / "sa-kubeconfig", token=token))
    yield Deployed(sa, system, namespace, user)
    sa.close()
    rbac = client.RbacAuthorizationV1Api(kube.api)
    for doc in docs:
        if doc["kind"] == "ClusterRoleBinding":
            rbac.delete_cluster_role_binding(doc["metadata"]["name"])
        elif doc["kind"] == "ClusterRole":
            rbac.delete_cluster_role(doc["metadata"]["name"])


@pytest.fixture
def refusals(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """Fails the test if any call was refused (403) on the way, even one the loop retried past:
    every right the code uses must be in the file."""
    caplog.set_level(logging.WARNING)
    yield
    messages = [r.getMessage() for r in caplog.records]
    forbidden = [m for m in messages if "forbidden" in m.lower() or "(403)" in m]
    assert forbidden == [], forbidden


def test_the_files_rules_are_applied_unchanged_but_for_the_namespaces_names() -> None:
    """What the other tests run under is the file: only namespaces and cluster-scoped names
    move, never a verb or resource."""
    docs = manifests()
    kinds = ["ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"]
    assert sorted(d["kind"] for d in docs) == sorted(kinds)

    def unnamed(rules: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{k: v for k, v in r.items() if k != "resourceNames"} for r in rules]

    for doc in docs:
        local = localized(doc, "sys-x", "work-x", "-x")
        assert unnamed(local.get("rules", [])) == unnamed(doc.get("rules", []))
        for rule in local.get("rules", []):
            assert rule.get("resourceNames", ["work-x"]) == ["work-x"]
        for subject in local.get("subjects", []):
            assert (subject["kind"], subject["namespace"]) == ("ServiceAccount", "sys-x")


@pytest.fixture
def world(deployed: Deployed, kube: Kube) -> Iterator[K8sWorld]:
    """A plane whose adapters are the ServiceAccount's; its hosts' Nodes registered by their
    kubelets (the admin here), its runs' states from a pod watch, as `serve` has them."""
    world = K8sWorld(deployed.sa, deployed.workloads, hosts=2, register=False)
    for host in world.hosts:
        register_host(kube.core, host, 8)
    world.runtime.watch()
    yield world
    world.runtime.close()


def test_a_reclaim_drains_and_the_on_demand_instance_runs_as_the_service_account(
    world: K8sWorld, deployed: Deployed, kube: Kube, kubelet: FakeKubelet, refusals: None
) -> None:
    c = world.cluster(desired=8, grace_s=3)
    world.plane.tick()
    (node,) = world.node_names(c, "preemptible")
    (standard,) = world.node_names(c, "standard")
    for host, role in ((node, "preemptible"), (standard, "standard")):  # labels, uncordon
        seen = kube.core.read_node(host)
        assert seen.metadata.labels[world.names.compute_class_label] == role
        assert seen.metadata.labels[world.names.cluster_label] == c and not seen.spec.unschedulable
    taint = world.names.taint
    assert ours(world, kube.core.read_node(node)) == [(taint.key, taint.value, taint.effect)]
    user_pod(kube, world, deployed.user, node, "train-0", grace_s=1)
    wait_until(lambda: any(n == "train-0" and w == "running" for n, w, _ in kubelet.log))

    od = world.on_demand(8)  # needs the preemptible node's host: reclaim
    world.plane.tick()
    drained = kube.core.read_node(node)
    assert drained.spec.unschedulable is True  # cordoned, tainted, held
    assert (world.names.draining_taint.key, "", "NoSchedule") in ours(world, drained)
    assert world.names.drain_finalizer in drained.metadata.finalizers
    on_node = events_of(kube, "kube-system", node)
    on_pod = events_of(kube, deployed.user, "train-0")
    assert [e.reason for e in on_node] == [e.reason for e in on_pod] == ["NodePreempted"]
    evicted = kube.core.read_namespaced_pod("train-0", deployed.user)
    assert evicted.metadata.deletion_timestamp is not None  # the eviction, with its grace
    assert evicted.metadata.deletion_grace_period_seconds == 1

    tick_until(world, lambda: world.cluster_of(node) is None, what="the host back in the pool")
    host = kube.core.read_node(node)
    assert ours(world, host) == [] and not host.metadata.finalizers
    tick_until(
        world,
        lambda: world.store.instance(od).state.status is InstanceStatus.RUNNING,
        what="the on-demand instance running",
    )
    (pod,) = kube.core.list_namespaced_pod(deployed.workloads).items  # made by the account
    assert pod.spec.node_name == node
    (source,) = pod.spec.containers[0].env_from
    assert secret_names(kube, deployed.workloads) == {source.secret_ref.name}
    allocation = world.store.instance(od).state.allocation_id
    assert allocation is not None
    with pytest.raises(Unavailable):  # the log is authorized; only the kubelet that serves it
        world.runtime.logs(allocation)  # is missing here (a fake one)

    world.plane.stop(od)  # evicted, its exit recorded (finalizer released), pod and Secret gone
    tick_until(
        world,
        lambda: (
            not kube.core.list_namespaced_pod(deployed.workloads).items
            and not secret_names(kube, deployed.workloads)
        ),
        what="the instance's pod and Secret deleted",
    )


def test_a_pdb_holds_the_eviction_until_the_deadline_then_the_pod_is_deleted(
    world: K8sWorld, deployed: Deployed, kube: Kube, kubelet: FakeKubelet, refusals: None
) -> None:
    c = world.cluster(desired=8, grace_s=3)
    world.plane.tick()
    (node,) = world.node_names(c, "preemptible")
    user_pod(kube, world, deployed.user, node, "infer-0", grace_s=1, app="infer")
    wait_until(lambda: any(n == "infer-0" and w == "running" for n, w, _ in kubelet.log))
    create_pdb(kube, deployed.user, "infer", "infer", minAvailable=1)  # the user's
    world.on_demand(8)
    world.plane.tick()
    deadline = int(kube.core.read_node(node).metadata.annotations[world.names.drain_deadline])
    while time.time() < deadline - 1:  # held: the eviction is refused (429), retried each tick
        world.plane.tick()
        held = kube.core.read_namespaced_pod("infer-0", deployed.user)
        assert held.metadata.deletion_timestamp is None
        time.sleep(0.2)
    tick_until(world, lambda: world.cluster_of(node) is None, what="the host back at the deadline")
    assert time.time() >= deadline
    wait_until(lambda: pod_gone(kube, deployed.user, "infer-0"), what="the pod deleted")


def test_a_pod_that_can_never_land_is_explained_on_it_as_the_service_account(
    world: K8sWorld, deployed: Deployed, kube: Kube, refusals: None
) -> None:
    c = world.cluster(desired=8)
    world.plane.tick()
    names = world.names
    selector = {names.cluster_label: c, names.compute_class_label: "preemptible"}
    spec = {"nodeSelector": selector, "containers": [{"name": "c", "image": "trainer"}]}
    kube.core.create_namespaced_pod(deployed.user, {"metadata": {"name": "job"}, "spec": spec})
    with pytest.raises(InvalidRequest, match="does not tolerate"):  # no toleration of the taint
        world.nodes.check_pod(deployed.user, "job")
    world.plane.tick()  # the loop says so on the pod, in the user's namespace
    (event,) = wait_until(lambda: events_of(kube, deployed.user, "job"), what="the Warning")
    assert event.type == "Warning" and event.reason == "PreemptibleTaintNotTolerated"


def user_pod(
    kube: Kube, world: K8sWorld, namespace: str, node: str, name: str, grace_s: int, **labels: str
) -> None:
    """A user's pod on a cluster node, in the user's own namespace (created as the admin)."""
    body = user_pod_body(world.names, node, name, grace_s, labels or {"app": "train"})
    kube.core.create_namespaced_pod(namespace, body)


def pod_gone(kube: Kube, namespace: str, name: str) -> bool:
    return name not in {p.metadata.name for p in kube.core.list_namespaced_pod(namespace).items}


def secret_names(kube: Kube, namespace: str) -> set[str]:
    return {s.metadata.name for s in kube.core.list_namespaced_secret(namespace).items}


def events_of(kube: Kube, namespace: str, name: str) -> list[Any]:
    """The events.k8s.io Events about object `name` in `namespace`, read as the admin."""
    found = kube.events.list_namespaced_event(namespace).items
    return [e for e in found if e.regarding.name == name]


# What rbac.yaml never grants (refused), and beside it what it does (allowed), so that a token
# which has no rights at all cannot pass. The file grants only what the code calls: the refused
# rows after the first block are rights it once had and the code never used (a later widening
# fails here). (verb, group, resource, subresource, namespace, name); "SYSTEM", "WORKLOADS" and
# "USER" stand for the test's namespaces.
ACCESS: list[tuple[bool, str, str, str, str, str, str]] = [
    (False, "create", "", "nodes", "", "", ""),
    (False, "delete", "", "nodes", "", "", ""),
    (False, "patch", "", "nodes", "status", "", ""),
    (False, "update", "", "nodes", "status", "", ""),
    (False, "patch", "", "pods", "status", "WORKLOADS", ""),
    (False, "update", "", "pods", "status", "USER", ""),
    (False, "create", "", "secrets", "", "SYSTEM", ""),
    (False, "patch", "", "secrets", "", "kube-system", ""),
    (False, "delete", "", "secrets", "", "USER", ""),
    (False, "get", "", "secrets", "", "kube-system", ""),
    (False, "list", "", "secrets", "", "", ""),
    (False, "create", "", "pods", "", "USER", ""),
    (False, "patch", "", "pods", "", "USER", ""),
    (False, "create", "coordination.k8s.io", "leases", "", "WORKLOADS", ""),
    (False, "create", "", "events", "", "kube-system", ""),
    (False, "list", "", "namespaces", "", "", ""),
    (False, "get", "", "namespaces", "", "SYSTEM", "SYSTEM"),
    # unused by the code, so not granted: Nodes are read and merge-patched, never watched or PUT
    (False, "watch", "", "nodes", "", "", ""),
    (False, "update", "", "nodes", "", "", ""),
    (False, "watch", "", "pods", "", "", ""),  # the only pod watch is the workloads namespace's
    (False, "watch", "", "pods", "", "USER", ""),
    (False, "get", "policy", "poddisruptionbudgets", "", "USER", ""),  # the Eviction API's
    (False, "list", "policy", "poddisruptionbudgets", "", "", ""),
    (False, "patch", "events.k8s.io", "events", "", "kube-system", ""),  # created once
    (False, "patch", "events.k8s.io", "events", "", "USER", ""),
    (False, "get", "", "secrets", "", "WORKLOADS", ""),  # the kubelet reads them, not the server
    (False, "list", "", "secrets", "", "WORKLOADS", ""),
    (False, "patch", "", "secrets", "", "WORKLOADS", ""),
    (False, "list", "", "persistentvolumeclaims", "", "WORKLOADS", ""),  # read by name
    (True, "patch", "", "nodes", "", "", ""),
    (True, "get", "", "nodes", "", "", ""),
    (True, "list", "", "nodes", "", "", ""),
    (True, "get", "", "pods", "", "USER", ""),
    (True, "delete", "", "pods", "", "USER", ""),
    (True, "list", "", "pods", "", "", ""),
    (True, "create", "", "pods", "eviction", "USER", ""),
    (True, "create", "", "pods", "", "WORKLOADS", ""),
    (True, "watch", "", "pods", "", "WORKLOADS", ""),
    (True, "patch", "", "pods", "", "WORKLOADS", ""),
    (True, "get", "", "pods", "log", "WORKLOADS", ""),
    (True, "create", "", "secrets", "", "WORKLOADS", ""),
    (True, "delete", "", "secrets", "", "WORKLOADS", ""),
    (True, "create", "", "services", "", "WORKLOADS", ""),
    (True, "delete", "", "services", "", "WORKLOADS", ""),
    (False, "list", "", "services", "", "WORKLOADS", ""),
    (False, "create", "", "services", "", "USER", ""),
    (True, "get", "", "persistentvolumeclaims", "", "WORKLOADS", ""),
    (True, "patch", "", "persistentvolumeclaims", "", "WORKLOADS", ""),
    (True, "create", "events.k8s.io", "events", "", "kube-system", ""),
    (True, "create", "events.k8s.io", "events", "", "USER", ""),
    (True, "get", "", "namespaces", "", "WORKLOADS", "WORKLOADS"),
]


def access_id(row: tuple[bool, str, str, str, str, str, str]) -> str:
    allowed, verb, _, resource, sub, ns, _ = row
    where = f"-in-{ns}" if ns else ""
    return (
        f"{'allowed' if allowed else 'refused'}-{verb}-{resource}{'/' + sub if sub else ''}{where}"
    )


@pytest.mark.parametrize(
    ("allowed", "verb", "group", "resource", "sub", "ns", "name"),
    ACCESS,
    ids=[access_id(a) for a in ACCESS],
)
def test_the_service_account_may_do_what_the_file_grants_and_nothing_it_never_grants(
    deployed: Deployed,
    allowed: bool,
    verb: str,
    group: str,
    resource: str,
    sub: str,
    ns: str,
    name: str,
) -> None:
    where = {"SYSTEM": deployed.system, "WORKLOADS": deployed.workloads, "USER": deployed.user}
    attributes = {"verb": verb, "group": group, "resource": resource, "subresource": sub}
    attributes |= {"namespace": where.get(ns, ns), "name": where.get(name, name)}
    review = {"spec": {"resourceAttributes": {k: v for k, v in attributes.items() if v}}}
    answer = client.AuthorizationV1Api(deployed.sa.api).create_self_subject_access_review(review)
    assert answer.status.allowed is allowed, answer.status


def test_refused_writes_are_forbidden_naming_the_rights(deployed: Deployed) -> None:
    """The same, tried for real: the API server answers 403, which the client names."""
    core, host = deployed.sa.core, f"gpu-{deployed.workloads}"
    secret = {"metadata": {"name": "stolen"}}
    attempts: dict[str, tuple[Any, ...]] = {
        "creating a Node": (core.create_node, {"metadata": {"name": host}}),
        "deleting a Node": (core.delete_node, host),
        "writing nodes/status": (core.patch_node_status, host, {"status": {"capacity": {}}}),
        "a Secret in the system namespace": (
            core.create_namespaced_secret,
            deployed.system,
            secret,
        ),
        "a Secret in a user's namespace": (core.create_namespaced_secret, deployed.user, secret),
        "reading kube-system's Secrets": (core.list_namespaced_secret, "kube-system"),
        "reading the runs' own Secrets": (core.list_namespaced_secret, deployed.workloads),
    }
    for what, (fn, *args) in attempts.items():
        with pytest.raises(Forbidden) as refused:
            deployed.sa.call(fn, *args, what=what)
        assert "rbac.yaml" in (refused.value.hint or ""), what


def test_the_start_checks_and_a_volume_claim_work_as_the_service_account(
    deployed: Deployed, kube: Kube, refusals: None
) -> None:
    deployed.sa.check_namespace(deployed.workloads)  # what `serve` checks at start
    assert deployed.sa.eviction_version().startswith("policy/")
    volumes = KubernetesVolumes(deployed.sa, namespace=deployed.workloads)
    mount = volumes.ensure("acct-1", "ckpts", 2)
    claim = kube.core.read_namespaced_persistent_volume_claim(mount.name, deployed.workloads)
    assert claim.spec.resources.requests["storage"] == "2Gi"
    assert volumes.ensure("acct-1", "ckpts", 5) == mount  # made once: read back
    volumes.resize("acct-1", "ckpts", 4)  # recorded on the claim (patch) until it is bound
    assert volumes.usage_bytes("acct-1", "ckpts") == 2 * 2**30
    assert volumes.holds("acct-1", "ckpts")
    volumes.delete("acct-1", "ckpts")
    assert not volumes.holds("acct-1", "ckpts")
