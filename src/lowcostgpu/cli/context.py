"""Where the CLI finds its server and key, and how it shows errors.

Resolution, first found wins: a command's flags, then `LOWCOSTGPU_URL` / `LOWCOSTGPU_API_KEY` /
`LOWCOSTGPU_ADMIN_KEY`, then the config file `$XDG_CONFIG_HOME/lowcostgpu/config.toml` (default
`~/.config/lowcostgpu/config.toml`, written by `lowcostgpu login`, mode 0600), then
http://127.0.0.1:8080 for the URL.
"""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import typer

from lowcostgpu.client.api import Client
from lowcostgpu.domain.errors import LowcostgpuError, Unauthenticated

DEFAULT_URL = "http://127.0.0.1:8080"
KEYS = ("url", "api_key", "admin_key")


def config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "lowcostgpu" / "config.toml"


def read_config() -> dict[str, str]:
    path = config_path()
    if not path.exists():
        return {}
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise Unauthenticated(f"cannot read {path}: {exc}", hint="fix or remove it") from None
    return {k: str(v) for k, v in data.items() if k in KEYS}


def write_config(values: dict[str, str]) -> Path:
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    merged = {**read_config(), **{k: v for k, v in values.items() if v}}
    text = "".join(f"{k} = {json.dumps(merged[k])}\n" for k in KEYS if k in merged)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return path


def setting(name: str) -> str | None:
    return os.environ.get(f"LOWCOSTGPU_{name.upper()}") or read_config().get(name)


def server_url() -> str:
    return setting("url") or DEFAULT_URL


def client() -> Client:
    """A client with the account key."""
    return Client(server_url(), setting("api_key"))


def admin_client(admin_key: str | None = None, url: str | None = None) -> Client:
    key = admin_key or setting("admin_key")
    if not key:
        raise Unauthenticated(
            "no admin key",
            hint="pass --admin-key, set LOWCOSTGPU_ADMIN_KEY, or `lowcostgpu login --admin-key`",
        )
    return Client(url or server_url(), key)


@contextmanager
def handled() -> Iterator[None]:
    """Our errors become one line on stderr and exit code 2, never a traceback."""
    try:
        yield
    except LowcostgpuError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None


def print_json(value: Any) -> None:
    typer.echo(json.dumps(value, indent=2, sort_keys=True))
