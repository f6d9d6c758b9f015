"""The pure part of the Kubernetes adapters: names, grace periods, tolerations (no server)."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest

from lowcostgpu.adapters.kubernetes.names import DEFAULT_NAMES
from lowcostgpu.adapters.kubernetes.objects import (
    check_allocation_id,
    object_name,
    pod_grace_s,
)
from lowcostgpu.adapters.kubernetes.placement import tolerates
from lowcostgpu.domain.errors import InvalidRequest

PREEMPTIBLE_TAINT = DEFAULT_NAMES.taint

DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


@pytest.mark.parametrize(
    "raw", ["i-3f2a@1700000000", "c-1a2b3c4d-n12", "ACCT_9/ckpts", "x" * 128, "-@-"]
)
def test_object_names_are_dns_labels_and_differ_for_different_ids(raw: str) -> None:
    name = object_name("lcg", raw)
    assert DNS_LABEL.fullmatch(name) and len(name) <= 63
    assert object_name("lcg", raw + "x") != name


def test_ids_that_differ_only_in_case_or_punctuation_get_different_names() -> None:
    assert object_name("lcg", "i-1@2") != object_name("lcg", "i-1:2")
    assert object_name("lcg", "c-1-N1") != object_name("lcg", "c-1-n1")


@pytest.mark.parametrize(
    ("spec_grace_s", "grace_s"),
    [(None, 30), (0, 0), (1, 1), (299, 299), (300, 300), (301, 300), (3600, 300)],
)
def test_a_pods_grace_is_its_own_at_most_300_s(spec_grace_s: int | None, grace_s: int) -> None:
    assert pod_grace_s(spec_grace_s) == grace_s


@pytest.mark.parametrize("allocation_id", ["", "-x", "a/b", "x" * 129, "é"])
def test_an_allocation_id_that_is_no_plain_name_is_refused(allocation_id: str) -> None:
    with pytest.raises(InvalidRequest, match="allocation id"):
        check_allocation_id(allocation_id)


def t(
    key: str | None, operator: str | None = None, value: str | None = None, effect: str = ""
) -> SimpleNamespace:
    return SimpleNamespace(key=key, operator=operator, value=value, effect=effect)


@pytest.mark.parametrize(
    ("tolerations", "tolerated"),
    [
        (None, False),
        ([], False),
        ([t("lowcostgpu.io/preemptible", "Exists")], True),
        ([t("lowcostgpu.io/preemptible", "Exists", effect="NoSchedule")], True),
        ([t("lowcostgpu.io/preemptible", "Exists", effect="NoExecute")], False),
        ([t("lowcostgpu.io/preemptible", None, "true")], True),  # Equal is the default
        ([t("lowcostgpu.io/preemptible", "Equal", "false")], False),
        ([t(None, "Exists")], True),  # tolerates everything
        ([t("other", "Exists")], False),
    ],
)
def test_tolerations_of_the_preemptible_taint(
    tolerations: list[SimpleNamespace] | None, tolerated: bool
) -> None:
    assert tolerates(tolerations, PREEMPTIBLE_TAINT) is tolerated
