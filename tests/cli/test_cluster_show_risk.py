"""`lowcostgpu cluster show`: a node among the next victims says so in its status column."""

from __future__ import annotations

from typing import Any

import pytest

from lowcostgpu.cli.clusters import _show


def cluster(risk: str | None) -> dict[str, Any]:
    node = {
        "id": "c-1-n2", "compute_class": "preemptible", "status": "ready", "gpus": 2,
        "host_id": "box-1", "labels": {}, "taints": [], "risk": risk,
    }  # fmt: skip
    return {
        "id": "c-1", "status": "active", "gpu": "a100-sxm4", "region": "eu-west",
        "gpus_per_node": 2, "allocated_preemptible_gpus": 2, "desired_preemptible_gpus": 2,
        "target_met": True, "nodes": [node],
    }  # fmt: skip


@pytest.mark.parametrize(("risk", "shown"), [("next", True), (None, False)])
def test_a_node_at_risk_is_shown_at_risk(
    risk: str | None, shown: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    _show(cluster(risk), None)
    out = capsys.readouterr().out
    assert ("ready · at risk" in out) is shown and "c-1-n2" in out
