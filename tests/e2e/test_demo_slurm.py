"""The product page's session on Slurm: `lowcostgpu demo --runtime slurm` on the session's real
Slurm lab. The training run is reclaimed by on-demand work that takes every GPU of its node,
checkpoints, is requeued as a new Slurm job on the same node and volume, resumes from the step it
checkpointed, finishes, and is billed."""

from __future__ import annotations

from decimal import Decimal

import pytest
from typer.testing import CliRunner

import slurm_lab
from lowcostgpu.cli.demo_live import SlurmDemo, run_live_demo
from lowcostgpu.cli.main import app

pytest.importorskip("torch")


def test_the_seed_session_on_slurm_is_two_jobs_on_the_host_resumed_at_the_step() -> None:
    lab = slurm_lab.require()
    lines: list[str] = []
    result = run_live_demo(lines.append, slurm=SlurmDemo(conf=lab.conf))
    text = "\n".join(lines)
    instance = result["instance"]
    assert instance["status"] == "succeeded", text  # type: ignore[index]
    checkpointed = result["interrupted_step"]
    assert isinstance(checkpointed, int) and checkpointed > 0, text
    assert result["resumed_step"] == checkpointed, text
    assert result["workload_resumed_from"] == checkpointed, text  # what the workload loaded
    assert f"capacity free — auto-restarted, resumed {checkpointed}" in text
    bill = result["bill"]
    kinds = {(line["kind"], line["capacity_class"]) for line in bill["lines"]}  # type: ignore[index]
    assert {("gpu", "interruptible"), ("gpu", "on-demand"), ("storage", None)} <= kinds
    assert Decimal(bill["balance"]) < Decimal("10")  # type: ignore[index]
    # Slurm's own record, not the demo's: the training run was two jobs, both on the demo's host.
    out = lab.run("squeue", "-h", "-a", "-t", "all", "-p", "lowcostgpu", "-o", "%i|%N|%T|%k")
    mine = [
        line.split("|")[:3]
        for line in out.splitlines()
        if line.endswith(f"|lowcostgpu instance {instance['id']}")  # type: ignore[index]
    ]
    host = text.split("): host ")[1].split(",")[0]
    assert len(mine) == 2, out
    assert {node for _, node, _ in mine} == {host}, out
    assert {state for _, _, state in mine} == {"COMPLETED"}, out
    assert [j["job_id"] for j in result["slurm_jobs"]] == sorted(  # type: ignore[attr-defined]
        (job_id for job_id, _, _ in mine), key=int
    )


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (
            ["--runtime", "slurm", "--slurm-conf", "/nonexistent/slurm.conf"],
            "the Slurm configuration /nonexistent/slurm.conf does not exist",
        ),
        (["--runtime", "kubernetes"], "the demo cannot run on runtime 'kubernetes'"),
    ],
    ids=["missing-conf", "other-runtime"],
)
def test_a_demo_that_cannot_run_on_slurm_says_why(argv: list[str], words: str) -> None:
    result = CliRunner().invoke(app, ["demo", *argv])
    assert result.exit_code == 2, result.output
    assert words in " ".join(result.output.split()), result.output
    assert "Traceback" not in result.output
