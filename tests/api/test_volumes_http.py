"""Volumes through the real HTTP stack and the CLI (Typer's runner): what a user types and reads."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from api_server import Api
from typer.testing import CliRunner

from lowcostgpu.cli.main import app
from lowcostgpu.client.api import Client
from lowcostgpu.client.volumes import VolumeApi
from lowcostgpu.domain.errors import Conflict, InvalidRequest, NotFound
from waiting import wait_until

HOLD = ["sleep", "3600"]


@pytest.fixture
def cli(api: Api, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("LOWCOSTGPU_URL", api.url)
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.delenv("LOWCOSTGPU_ADMIN_KEY", raising=False)
    return CliRunner()


def run(cli: CliRunner, *args: str, code: int = 0) -> str:
    result = cli.invoke(app, list(args))
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    return result.output


def keyed(api: Api, name: str) -> tuple[str, Client]:
    """A new account with credit: its key, and a client with it."""
    with api.admin() as admin:
        created = admin.create_account(name)
        admin.topup(created["id"], "10.00")
    return created["api_key"], Client(api.url, created["api_key"])


def gone(user: Client, instance_id: str) -> None:
    """Stop the instance, wait until it is stopped, delete it."""
    user.stop(instance_id)
    wait_until(lambda: user.instance(instance_id)["status"] == "stopped", what="stopped")
    user.delete(instance_id)


def test_volumes_over_http_list_get_grow_delete_and_the_refusals(api: Api) -> None:
    key, user = keyed(api, "vols-http")
    volumes = VolumeApi(user)
    first = user.launch(gpu="a100-sxm4", command=HOLD, volume="ckpts:1GB")
    with pytest.raises(Conflict, match="exists with 1 GB, not 500 GB"):
        user.launch(gpu="a100-sxm4", command=HOLD, volume="ckpts:500GB")
    with pytest.raises(InvalidRequest, match="has no unit"):
        user.launch(gpu="a100-sxm4", command=HOLD, volume="other:50")
    (listed,) = volumes.list()
    assert listed["name"] == "ckpts" and listed["size_gb"] == 1
    assert listed["in_use_by"] == [first["id"]] and listed["checkpoint_step"] is None
    assert volumes.get("ckpts") == listed
    grown = volumes.resize("ckpts", 3)
    assert grown["size_gb"] == 3 and grown["resized_at"] is not None
    with pytest.raises(InvalidRequest, match="cannot shrink"):
        volumes.resize("ckpts", 2)
    with pytest.raises(Conflict, match=f"in use by {first['id']}") as refused:
        volumes.delete("ckpts")
    assert refused.value.details == {"instances": [first["id"]], "more": False}
    gone(user, first["id"])
    volumes.delete("ckpts")
    assert volumes.list() == []
    with pytest.raises(NotFound, match="no volume ckpts"):
        volumes.get("ckpts")
    bad = httpx.get(f"{api.url}/v1/volumes/a.b", headers={"authorization": f"Bearer {key}"})
    assert bad.status_code == 422 and "not allowed" in bad.json()["message"]


def test_another_accounts_volume_of_the_same_name_is_a_404_not_in_use(api: Api) -> None:
    _, owner = api.account("vols-owner")
    _, other = api.account("vols-other")
    owner.launch(gpu="a100-sxm4", command=HOLD, volume="shared-name:1GB")
    for call in (
        lambda: VolumeApi(other).get("shared-name"),
        lambda: VolumeApi(other).delete("shared-name"),
        lambda: VolumeApi(other).resize("shared-name", 5),
    ):
        with pytest.raises(NotFound) as missing:
            call()
        assert str(missing.value) == "no volume shared-name (`lowcostgpu volumes ls` lists yours)"
    assert VolumeApi(other).list() == []
    with pytest.raises(InvalidRequest, match="there is no volume shared-name yet"):
        other.launch(gpu="a100-sxm4", command=HOLD, volume="shared-name")


def test_the_cli_manages_volumes_and_says_when_a_launch_resumes_from_one(
    api: Api, cli: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    key, user = keyed(api, "vols-cli")
    monkeypatch.setenv("LOWCOSTGPU_API_KEY", key)
    first = json.loads(
        run(cli, "launch", "--gpu", "a100-sxm4", "--volume", "ckpts:1GB", "--json", "--", *HOLD)
    )
    wait_until(lambda: user.instance(first["id"])["status"] == "running", what="running")
    api.running.wired.plane.report_checkpoint(first["id"], 300)  # as its workload would
    out = run(cli, "volumes", "ls")
    assert "ckpts" in out and "1 GB" in out and first["id"] in out and "step 300" in out
    assert out.count("ckpts") == 1
    shown = run(cli, "volumes", "show", "ckpts")
    assert "size        1 GB" in shown and "checkpoint  step 300" in shown
    gone(user, first["id"])
    out = run(cli, "launch", "--gpu", "a100-sxm4", "--volume", "ckpts:500GB", "--", *HOLD, code=2)
    assert out.startswith("error: volume ckpts exists with 1 GB, not 500 GB")
    assert "--volume ckpts or ckpts:1GB" in out
    out = run(cli, "launch", "--gpu", "a100-sxm4", "--volume", "ckpts", "--", *HOLD)
    assert "volume ckpts holds checkpoint step 300: the run resumes from it" in out
    second = user.instances()[0]["id"]
    assert "grown" not in run(cli, "volumes", "resize", "ckpts", "2GB")
    assert json.loads(run(cli, "volumes", "show", "ckpts", "--json"))["size_gb"] == 2
    out = run(cli, "volumes", "resize", "ckpts", "2", code=2)
    assert "has no unit" in out
    out = run(cli, "volumes", "rm", "ckpts", code=2)
    assert f"in use by {second}" in out and f"lowcostgpu rm {second}" in out
    gone(user, second)
    assert "volume ckpts deleted" in run(cli, "volumes", "rm", "ckpts")
    assert json.loads(run(cli, "volumes", "ls", "--json")) == []
