"""`login` asks for what is missing at a terminal, and never saves a config without a key."""

from __future__ import annotations

from pathlib import Path

import pytest
from api_server import ADMIN_KEY, Api
from typer.testing import CliRunner

from lowcostgpu.cli import admin as admin_cli
from lowcostgpu.cli.main import app

FLAGS = "pass --api-key KEY, or --admin-key KEY --create-account NAME"


@pytest.fixture
def config(api: Api, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("LOWCOSTGPU_URL", api.url)
    for name in ("LOWCOSTGPU_API_KEY", "LOWCOSTGPU_ADMIN_KEY"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path / "config" / "lowcostgpu" / "config.toml"


def at_a_terminal(monkeypatch: pytest.MonkeyPatch, yes: bool = True) -> None:
    """CliRunner's stdin is no terminal: say whether `login` is to take it for one."""
    monkeypatch.setattr(admin_cli, "interactive", lambda: yes)


def login(*args: str, answers: str = "") -> tuple[int, str]:
    result = CliRunner().invoke(app, ["login", *args], input=answers)
    assert "Traceback" not in result.output
    return result.exit_code, result.output


def test_without_a_terminal_and_without_flags_it_fails_naming_the_flags(config: Path) -> None:
    code, out = login()
    assert code == 2
    assert out == f"error: login needs a key and stdin is not a terminal ({FLAGS})\n"
    assert not config.exists()


def test_at_a_terminal_it_asks_the_url_and_the_hidden_api_key(
    api: Api, config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    at_a_terminal(monkeypatch)
    with api.admin() as admin:
        key = admin.create_account("prompted")["api_key"]
    code, out = login(answers=f"{api.url}\n{key}\n")
    assert code == 0, out
    assert f"Server URL [{api.url}]:" in out and "API key (input hidden" in out
    assert key not in out  # hidden
    assert "logged in to" in out and "(prompted)" in out
    assert f'api_key = "{key}"' in config.read_text()


def test_an_empty_api_key_creates_an_account_with_the_admin_key_asked_for(
    api: Api, config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    at_a_terminal(monkeypatch)
    code, out = login(answers=f"\n\n{ADMIN_KEY}\nnewcomer\n")
    assert code == 0, out
    assert "Admin key (input hidden" in out and "Name of the account to create:" in out
    assert ADMIN_KEY not in out
    assert "(newcomer) created" in out and "logged in to" in out
    text = config.read_text()
    assert "api_key = " in text and f'admin_key = "{ADMIN_KEY}"' in text


def test_create_account_without_an_admin_key_asks_for_it(
    config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    at_a_terminal(monkeypatch)
    code, out = login("--create-account", "asked", answers=f"\n{ADMIN_KEY}\n")
    assert code == 0, out
    assert "(asked) created" in out and config.exists()


@pytest.mark.parametrize(
    ("args", "answers", "words"),
    [
        ((), "\n\n\n", "no API key and no admin key given: nothing saved"),
        ((), "\nlcg_wrong-key\n", "error: "),  # refused by the server: nothing saved
        (("--create-account", "x"), "\n\n", "no admin key"),
    ],
    ids=["nothing given", "a wrong key", "no admin key to create with"],
)
def test_at_a_terminal_nothing_is_saved_without_a_working_key(
    config: Path, monkeypatch: pytest.MonkeyPatch, args: tuple[str, ...], answers: str, words: str
) -> None:
    at_a_terminal(monkeypatch)
    code, out = login(*args, answers=answers)
    assert code == 2 and words in out, out
    assert not config.exists()


def test_flags_alone_still_log_in_without_a_terminal(config: Path) -> None:
    code, out = login("--admin-key", ADMIN_KEY, "--create-account", "scripted")
    assert code == 0, out
    assert "Server URL" not in out and "(scripted) created" in out and config.exists()


def test_prices_work_with_no_config_and_no_key(config: Path) -> None:
    result = CliRunner().invoke(app, ["prices", "--json"])
    assert result.exit_code == 0, result.output
    assert "a100-sxm4" in result.output and not config.exists()
