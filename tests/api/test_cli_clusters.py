"""`lowcostgpu cluster …` through the real CLI against a real server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from api_server import Api
from typer.testing import CliRunner

from lowcostgpu.cli.main import app
from waiting import wait_until


@pytest.fixture
def cli(api: Api, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("LOWCOSTGPU_URL", api.url)
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.delenv("LOWCOSTGPU_ADMIN_KEY", raising=False)
    _, account = api.account("cluster-cli")
    monkeypatch.setenv("LOWCOSTGPU_API_KEY", account._http.headers["authorization"].split()[1])
    return CliRunner()


def run(cli: CliRunner, *args: str, code: int = 0) -> str:
    result = cli.invoke(app, list(args))
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    return result.output


def show(cli: CliRunner, cluster_id: str) -> dict[str, object]:
    return dict(json.loads(run(cli, "cluster", "show", cluster_id, "--json")))


def test_create_show_update_convert_and_remove_a_cluster(cli: CliRunner) -> None:
    out = run(
        cli, "cluster", "create", "--gpu", "a100-sxm4", "--gpus-per-node", "1",
        "--preemptible-gpus", "1", "--json",
    )  # fmt: skip
    created = json.loads(out)
    cluster_id = created["id"]
    assert created["desired_preemptible_gpus"] == 1
    wait_until(
        lambda: show(cli, cluster_id)["allocated_preemptible_gpus"] == 1,
        what="the preemptible GPU allocated",
    )
    table = run(cli, "cluster", "show", cluster_id)
    assert "preemptible 1/1 GPUs (met)" in table
    assert "standard" in table and "preemptible" in table
    assert "lowcostgpu.io/preemptible=true:NoSchedule" in table
    assert cluster_id in run(cli, "cluster", "ls")

    preemptible = next(
        n
        for n in show(cli, cluster_id)["nodes"]  # type: ignore[attr-defined]
        if n["compute_class"] == "preemptible"
    )
    out = run(cli, "cluster", "convert", cluster_id, preemptible["id"], "standard", code=2)
    assert out.startswith("error:") and "in place" in out

    # More than the pool could ever hold (2 GPUs, one of them the standard node's): refused
    # with the maximum, and the target stays as it was.
    out = run(cli, "cluster", "update", cluster_id, "--preemptible-gpus", "3", code=2)
    assert out.startswith("error:") and "at most 1 preemptible GPUs" in out
    assert show(cli, cluster_id)["desired_preemptible_gpus"] == 1
    out = run(cli, "cluster", "update", cluster_id, "--preemptible-gpus", "-1", code=2)
    assert out.startswith("error:")
    run(cli, "cluster", "update", cluster_id, "--preemptible-gpus", "0")
    run(cli, "cluster", "rm", cluster_id)


def test_cluster_errors_are_one_line(cli: CliRunner) -> None:
    out = run(cli, "cluster", "create", "--gpu", "a100-sxm4", "--standard-nodes", "0", code=2)
    assert out.startswith("error:") and "standard node" in out
    out = run(cli, "cluster", "show", "c-nope", code=2)
    assert out.startswith("error:")
