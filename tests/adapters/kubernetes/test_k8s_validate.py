"""The bodies lowcostgpu sends, checked against Kubernetes ≥ 1.22 schemas (only a 1.20 API server
runs here): kubernetes-validate's bundled strict schemas, so an unknown field fails too (a 1.20
server drops one silently). Each row also breaks its body, to show the check bites: a required
field removed where the schema requires one, else a misspelled field."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import kubernetes_validate
import pytest
from kubernetes import client

from lowcostgpu.adapters.kubernetes import drain, placement
from lowcostgpu.adapters.kubernetes.client import Kube
from lowcostgpu.adapters.kubernetes.names import DEFAULT_NAMES
from lowcostgpu.adapters.kubernetes.node_roles import (
    cluster_role,
    draining_role,
    pool_role,
    role_patch,
)
from lowcostgpu.adapters.kubernetes.objects import (
    claim,
    drain_event,
    env_secret,
    workload_pod,
)
from lowcostgpu.domain.errors import InvalidRequest
from lowcostgpu.ports.runtime import VolumeMount, WorkloadStart

VERSIONS = ["1.25", "1.37"]  # the oldest and newest schemas the package bundles
START = WorkloadStart(
    instance_id="i-7", allocation_id="i-7@100", host_id="gpu-0", gpu_indices=(0, 1),
    restart_count=0, argv=("python", "train.py"), env={"LOWCOSTGPU_TOKEN": "t"},
    volume=VolumeMount(name="lcg-vol-x", size_gb=2, path="/mnt/v"), grace_period_s=45,
)  # fmt: skip
POD = client.V1Pod(
    metadata=client.V1ObjectMeta(name="train-0", namespace="users", uid="u-1"),
    spec=client.V1PodSpec(containers=[], termination_grace_period_seconds=30),
)


class RecordingKube(Kube):
    """Records what would go on the wire instead of sending it (policy/v1, as from 1.22)."""

    def __init__(self) -> None:
        super().__init__(client.ApiClient())
        self._eviction_version = "policy/v1"
        self.sent: list[Any] = []

    def call(self, fn: Callable[..., Any], *args: Any, what: str, **kw: Any) -> Any:
        self.sent.append(self.api.sanitize_for_serialization(args[-1]))


def eviction() -> dict[str, Any]:
    kube = RecordingKube()
    drain.evict(kube, POD, 5)
    return dict(kube.sent[-1])


NAMES = DEFAULT_NAMES
NODE = client.V1Node(
    metadata=client.V1ObjectMeta(name="gpu-0", uid="u-n", resource_version="7", labels={}),
    spec=client.V1NodeSpec(taints=[client.V1Taint(key="nvidia.com/gpu", effect="NoSchedule")]),
)


def node_patch(role: str) -> Callable[[], dict[str, Any]]:
    """A host's role change as the provider sends it (`node_roles`), as a Node body."""

    def body() -> dict[str, Any]:
        labels = {NAMES.cluster_label: "c-1", NAMES.compute_class_label: "preemptible"}
        changes = {
            "cluster": lambda: cluster_role(NODE, NAMES, labels, {NAMES.node_id: "n-1"}, True),
            "draining": lambda: draining_role(NODE, NAMES, {NAMES.drain_deadline: "1700000300"}),
            "pool": lambda: pool_role(NODE, NAMES),
        }
        change = changes[role]()
        assert change is not None
        patch = role_patch(NODE, change)
        for key in ("labels", "annotations"):  # a merge patch's None deletes: not in a schema
            patch["metadata"][key] = {
                k: v for k, v in patch["metadata"][key].items() if v is not None
            }
        return {"apiVersion": "v1", "kind": "Node", **patch}

    return body


def event_about(regarding: dict[str, str]) -> Callable[[], dict[str, Any]]:
    return lambda: drain_event(
        regarding, names=NAMES, reason="NodePreempted", note="x", key="k", at=1.7e9,
        warning=True, related={"kind": "Node", "name": "gpu-0", "uid": "u-n"},
    )  # fmt: skip


def drop(*path: Any) -> Callable[[dict[str, Any]], None]:
    def broken(body: dict[str, Any]) -> None:
        *parents, last = path
        for key in parents:
            body = body[key]
        del body[last]

    return broken


def misspell(key: str) -> Callable[[dict[str, Any]], None]:
    def broken(body: dict[str, Any]) -> None:
        body[key.lower() + "x"] = body.pop(key)

    return broken


ROWS: list[tuple[str, Callable[[], dict[str, Any]], Callable[[dict[str, Any]], None]]] = [
    ("workload pod", lambda: workload_pod(START, image="img", env_secret="s"),
     drop("spec", "containers", 0, "name")),
    ("workload pod's claim mount", lambda: workload_pod(START, image="img", env_secret="s"),
     drop("spec", "volumes", 0, "persistentVolumeClaim", "claimName")),
    ("env secret", lambda: env_secret(START), misspell("stringData")),
    ("claim", lambda: claim("acct", "ckpts", 2, "fast"), misspell("spec")),
    ("node event", event_about({"kind": "Node", "name": "gpu-0", "uid": "u-n"}),
     drop("eventTime")),
    ("evicted pod's event", event_about({"kind": "Pod", "name": "train-0", "namespace": "users",
                                         "uid": "u-1"}), drop("eventTime")),
    ("pod event", lambda: placement.pod_event(POD, InvalidRequest("no"), 1.7e9, NAMES),
     drop("eventTime")),
    ("eviction", eviction, misspell("deleteOptions")),
    ("host joins a cluster", node_patch("cluster"), drop("spec", "taints", 0, "effect")),
    ("host drains", node_patch("draining"), drop("spec", "taints", 0, "effect")),
    ("host back in the pool", node_patch("pool"), drop("spec", "taints", 0, "effect")),
]  # fmt: skip


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(("what", "body", "break_it"), ROWS, ids=[r[0] for r in ROWS])
def test_a_body_fits_the_schema_and_fails_it_once_broken(
    what: str, body: Callable[[], dict[str, Any]], break_it: Any, version: str
) -> None:
    good = body()
    kubernetes_validate.validate(good, version, strict=True)
    bad = copy.deepcopy(good)
    break_it(bad)
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, version, strict=True)
