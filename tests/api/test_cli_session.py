"""The CLI through Typer's runner against a real server: what a user types, what they read."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from api_server import ADMIN_KEY, Api, free_port
from typer.testing import CliRunner

from lowcostgpu.cli.main import app
from waiting import wait_until


@pytest.fixture
def cli(api: Api, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("LOWCOSTGPU_URL", api.url)
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.delenv("LOWCOSTGPU_API_KEY", raising=False)
    monkeypatch.delenv("LOWCOSTGPU_ADMIN_KEY", raising=False)
    return CliRunner()


def run(cli: CliRunner, *args: str, code: int = 0) -> str:
    result = cli.invoke(app, list(args))
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    return result.output


def test_login_creates_an_account_and_saves_the_config(cli: CliRunner, tmp_path: Path) -> None:
    out = run(cli, "login", "--admin-key", ADMIN_KEY, "--create-account", "cli-user")
    assert "logged in to" in out and "balance $0.00" in out
    config = (tmp_path / "config" / "lowcostgpu" / "config.toml").read_text()
    assert "api_key" in config and "admin_key" in config
    assert (tmp_path / "config" / "lowcostgpu" / "config.toml").stat().st_mode & 0o777 == 0o600
    assert "cli-user" in run(cli, "whoami")
    assert "balance $0.00" in run(cli, "balance")
    out = run(cli, "launch", "--gpu", "a100-sxm4", "--", "sleep", "1", code=2)
    assert out.startswith("error: the balance of account") and "top" in out


def test_a_user_session_launch_ls_show_events_logs_stop_rm_bill(
    api: Api, cli: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    created = json.loads(run(cli, "accounts", "create", "sess", "--admin-key", ADMIN_KEY, "--json"))
    run(cli, "topup", created["id"], "7.5", "--admin-key", ADMIN_KEY)
    monkeypatch.setenv("LOWCOSTGPU_API_KEY", created["api_key"])
    out = run(
        cli, "launch", "--gpu", "a100-sxm4", "--env", "WHO=cli", "--", "sh", "-c", "echo hi $WHO"
    )
    instance_id = out.split()[2]
    assert out.startswith(f"✓ instance {instance_id}") and "$0.234/hr" in out
    wait_until(lambda: "succeeded" in run(cli, "show", instance_id), what="the run succeeded")
    assert instance_id in run(cli, "ls")
    assert run(cli, "logs", instance_id) == "hi cli\n"
    assert "Succeeded" in run(cli, "events", instance_id)
    held = json.loads(run(cli, "launch", "--gpu", "a100-sxm4", "--json", "--", "sleep", "60"))
    assert held["status"] in ("starting", "running")
    assert "stopping" in run(cli, "stop", held["id"]) or "stopped" in run(cli, "show", held["id"])
    assert "deleted" in run(cli, "rm", instance_id)
    assert "total $" in run(cli, "bill") and "balance $7.50" in run(cli, "balance")
    assert "eu-west" in run(cli, "fleet")


def test_what_a_user_reads_is_for_people_cents_local_times_no_reprs(
    api: Api, cli: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, user = api.account("readable", credit="7.5")
    monkeypatch.setenv("LOWCOSTGPU_API_KEY", user._http.headers["authorization"][7:])
    out = run(cli, "launch", "--gpu", "a100-sxm4", "--", "sleep", "60")
    instance_id = out.split()[2]
    wait_until(lambda: "running" in run(cli, "show", instance_id[:6]), what="it runs")
    shown = run(cli, "show", instance_id[:6])
    assert "None" not in shown and "{" not in shown and "queue " in shown
    assert re.fullmatch(rf"id +{instance_id}", shown.splitlines()[0]), shown  # aligned
    created = r"created_at +20\d\d-\d\d-\d\d \d\d:\d\d \((just now|.+ ago)\)"
    assert re.search(created, shown), shown  # local time and how long ago
    assert run(cli, "stop", instance_id[2:7]).startswith(instance_id)
    wait_until(lambda: "stopped" in run(cli, "show", instance_id), what="it stopped")
    balance = run(cli, "balance").splitlines()
    assert balance[0].startswith("balance $7.") and len(balance[0].split()[1]) == len("$7.50")
    assert all(line.strip()[:2] == "20" and line.strip()[4] == "-" for line in balance[1:])
    bill = run(cli, "bill").splitlines()
    assert bill[0].startswith("every usage until 20")
    total = next(line for line in bill if line.startswith("total "))
    assert len(total.split()[1]) == len("$0.00") and "exact" not in total
    events = run(cli, "events", "--since", "1h").splitlines()
    assert events and all(line[:2] == "20" and line[10] == " " for line in events)


def test_prices_show_the_seed_table_with_exact_values(
    cli: CliRunner, api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, user = api.account("prices-cli")
    monkeypatch.setenv("LOWCOSTGPU_API_KEY", user._http.headers["authorization"][7:])
    assert json.loads(run(cli, "prices", "--json"))["gpus"]
    table = run(cli, "prices")
    assert "$0.2405" in table and "$24.05" in table and "−$84.00" in table
    assert "$0.234" in table and "$23.40" in table


def test_without_a_server_one_line_says_how_to_start_one(
    cli: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOWCOSTGPU_URL", f"http://127.0.0.1:{free_port()}")
    out = run(cli, "ls", code=2)
    assert out.count("\n") == 1
    assert "no lowcostgpu server answers" in out and "make run" in out and "lowcostgpu serve" in out


def test_bad_flags_are_clear(cli: CliRunner) -> None:
    out = run(cli, "launch", "--gpu", "a100-sxm4", "--env", "NOEQUALS", "--", "true", code=2)
    assert "KEY=VALUE" in out
