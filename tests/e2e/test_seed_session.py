"""The product page's session, for real: `lowcostgpu demo` runs a real training run on the local
runtime, on-demand work reclaims its GPU, it checkpoints, requeues, restarts, resumes from the
step it checkpointed, finishes, and is billed from the meter."""

from __future__ import annotations

from decimal import Decimal

import pytest

from lowcostgpu.cli.demo_live import run_live_demo

pytest.importorskip("torch")


def test_the_seed_session_resumes_from_the_step_it_checkpointed_and_is_billed() -> None:
    lines: list[str] = []
    result = run_live_demo(lines.append)
    text = "\n".join(lines)
    assert result["instance"]["status"] == "succeeded", text  # type: ignore[index]
    checkpointed = result["interrupted_step"]
    assert isinstance(checkpointed, int) and checkpointed > 0, text
    assert result["resumed_step"] == checkpointed, text  # what the control plane restarted from
    assert result["workload_resumed_from"] == checkpointed, text  # what the workload loaded
    assert f"interrupted — checkpoint step {checkpointed} on volume" in text
    assert f"capacity free — auto-restarted, resumed {checkpointed}" in text
    assert "✓ instance i-" in text and "running · $0.234/hr" in text
    assert "✓ run finished · " in text
    bill = result["bill"]
    kinds = {(line["kind"], line["capacity_class"]) for line in bill["lines"]}  # type: ignore[index]
    assert {("gpu", "interruptible"), ("gpu", "on-demand"), ("storage", None)} <= kinds
    usage = result["usage"]
    assert usage["gpu_seconds"] > 0  # type: ignore[index]
    assert Decimal(bill["balance"]) < Decimal("10")  # type: ignore[index]
