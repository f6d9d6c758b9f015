"""A host's roles as Node patches, and the names an operator chooses (pure: no server)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from lowcostgpu.adapters.kubernetes.names import DEFAULT_NAMES, KubeNames, parse_taint
from lowcostgpu.adapters.kubernetes.node_roles import (
    cluster_role,
    draining_role,
    pool_role,
    risk_mark,
    role_patch,
)
from lowcostgpu.core.nodes import Taint
from lowcostgpu.domain.errors import ConfigError

N = DEFAULT_NAMES
THEIRS = SimpleNamespace(key="nvidia.com/gpu", value="", effect="NoSchedule", time_added=None)


def node(
    labels: dict[str, str] | None = None,
    taints: list[Any] | None = None,
    unschedulable: bool = True,
    finalizers: list[str] | None = None,
) -> SimpleNamespace:
    meta = SimpleNamespace(
        labels={"kubernetes.io/hostname": "h1", **(labels or {})},
        annotations={},
        finalizers=finalizers,
        resource_version="42",
    )
    spec = SimpleNamespace(taints=taints, unschedulable=unschedulable)
    return SimpleNamespace(metadata=meta, spec=spec)


def taint(t: Taint) -> SimpleNamespace:
    return SimpleNamespace(key=t.key, value=t.value, effect=t.effect, time_added=None)


@pytest.mark.parametrize("preemptible", [True, False])
def test_joining_a_cluster_keeps_the_operators_taints_and_labels_and_uncordons(
    preemptible: bool,
) -> None:
    change = cluster_role(node(taints=[THEIRS]), N, {N.cluster_label: "c-1"}, {}, preemptible)
    assert change is not None
    keys = [t["key"] for t in change["taints"]]
    assert keys == (["nvidia.com/gpu", N.taint.key] if preemptible else ["nvidia.com/gpu"])
    assert change["unschedulable"] is False and change["labels"][N.cluster_label] == "c-1"
    patch = role_patch(node(), change)
    assert patch["metadata"]["resourceVersion"] == "42"  # a concurrent writer makes it a 409
    assert "kubernetes.io/hostname" not in patch["metadata"]["labels"]  # theirs untouched


def test_a_drain_adds_the_draining_taint_cordon_and_finalizer_beside_the_class_taint() -> None:
    joined = node({N.cluster_label: "c-1"}, [taint(N.taint), THEIRS], False, ["theirs/keep"])
    change = draining_role(joined, N, {N.drain_deadline: "1700000300"})
    assert change is not None
    assert sorted(t["key"] for t in change["taints"]) == sorted(
        ["nvidia.com/gpu", N.taint.key, N.draining_taint.key]
    )
    assert change["unschedulable"] is True
    assert change["finalizers"] == ["theirs/keep", N.drain_finalizer]


def test_back_in_the_pool_nothing_of_ours_is_left_and_the_host_is_cordoned() -> None:
    drained = node(
        {N.cluster_label: "c-1", N.compute_class_label: "preemptible"},
        [taint(N.taint), taint(N.draining_taint), THEIRS],
        True,
        ["theirs/keep", N.drain_finalizer],
    )
    change = pool_role(drained, N)
    assert change is not None
    assert change["labels"][N.cluster_label] is None  # a merge patch's delete
    assert [t["key"] for t in change["taints"]] == ["nvidia.com/gpu"]
    assert change["finalizers"] == ["theirs/keep"] and change["unschedulable"] is True


def test_a_host_already_in_its_role_needs_no_patch() -> None:
    assert pool_role(node(taints=[THEIRS]), N) is None


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("t.ai/preemptible=true:NoSchedule", Taint("t.ai/preemptible", "true", "NoSchedule")),
        ("spot:NoExecute", Taint("spot", "", "NoExecute")),
        ("spot=true", None),
        ("spot=true:PreferNoSchedule", None),  # never blocks: preemptible pods would mix
        ("", None),
    ],
)  # fmt: skip
def test_a_taint_is_read_as_kubectl_writes_it(text: str, parsed: Taint | None) -> None:
    if parsed is None:
        with pytest.raises(ConfigError, match="cannot read the taint"):
            parse_taint(text)
    else:
        assert parse_taint(text) == parsed


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"prefix": "Together.AI"}, "not a DNS subdomain"),
        ({"prefix": "a/b"}, "not a DNS subdomain"),
        ({"preempted_reason": "node preempted"}, "CamelCase"),
        ({"preempted_reason": "Preempted"}, "kube-scheduler's own"),
    ],
)
def test_names_an_operator_cannot_use_are_refused_with_what_to_do(
    kwargs: dict[str, str], error: str
) -> None:
    with pytest.raises(ConfigError, match=error) as refused:
        KubeNames(**kwargs)
    assert refused.value.hint


def test_every_key_follows_the_prefix() -> None:
    names = KubeNames(prefix="together.ai")
    keys = [names.cluster_label, names.compute_class_label, names.taint.key,
            names.draining_taint.key, names.drain_finalizer, names.drain_deadline]  # fmt: skip
    assert all(k.startswith("together.ai/") for k in keys)


@pytest.mark.parametrize(
    ("risk", "label", "since"), [("next", "next", "1700000000"), ("", None, None)]
)
def test_a_risk_mark_moves_only_the_risk_label_and_annotation(
    risk: str, label: str | None, since: str | None
) -> None:
    serving = node({N.cluster_label: "c-1"}, [taint(N.taint), THEIRS], False, ["theirs/keep"])
    if not risk:
        serving.metadata.labels[N.risk_label] = "next"
        serving.metadata.annotations[N.risk_since] = "1700000000"
    change = risk_mark(serving, N, risk, 1700000000)
    assert change is not None
    assert change["labels"] == {N.risk_label: label}
    assert change["annotations"] == {N.risk_since: since}
    assert sorted(t["key"] for t in change["taints"]) == sorted([N.taint.key, "nvidia.com/gpu"])
    assert change["unschedulable"] is False and change["finalizers"] == ["theirs/keep"]
    assert risk_mark(node(), N, "", 0) is None  # nothing to clear: no patch


def test_a_drain_and_the_pool_drop_the_risk_mark() -> None:
    warned = node({N.cluster_label: "c-1", N.risk_label: "next"}, [taint(N.taint)], False)
    warned.metadata.annotations[N.risk_since] = "1700000000"
    for change in (draining_role(warned, N, {N.drain_deadline: "1"}), pool_role(warned, N)):
        assert change is not None
        assert change["labels"][N.risk_label] is None
        assert change["annotations"][N.risk_since] is None
