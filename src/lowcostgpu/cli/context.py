"""Where the CLI finds its server and key, and how it shows errors.

Resolution, first found wins: a command's flags, then `LOWCOSTGPU_URL` / `LOWCOSTGPU_API_KEY` /
`LOWCOSTGPU_ADMIN_KEY`, then the config file `$XDG_CONFIG_HOME/lowcostgpu/config.toml` (default
`~/.config/lowcostgpu/config.toml`, written by `lowcostgpu login`, mode 0600), then
http://127.0.0.1:8080 for the URL.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperCommand

from lowcostgpu.client.api import Client
from lowcostgpu.client.clusters import ClusterApi
from lowcostgpu.domain.errors import InvalidRequest, LowcostgpuError, NotFound, Unauthenticated

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


# JSON, all of it or some fields (as `gh --json id,status`) ------------------------------------

ALL_FIELDS = "*"  # what a bare `--json` stands for (`JsonCommand` writes it in)
FIELD_LIST = re.compile(r"[a-z_]+(,[a-z_]+)*")  # no digits or dashes: an id is never taken for it
JsonFields = Annotated[
    str | None,
    typer.Option(
        "--json",
        metavar="[FIELDS]",
        help="print JSON (exact amounts, epoch seconds); --json id,status: only those fields",
        show_default=False,
    ),
]


class JsonCommand(TyperCommand):
    """A command whose `--json` may stand alone or take fields: a bare `--json` (last, or before
    another option or `--`) is read as `--json=*`. Typer has no optional option values."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        return super().parse_args(ctx, bare_json_filled(args))


def bare_json_filled(args: list[str]) -> list[str]:
    """`--json` with no field list after it becomes `--json=*`; `--json id,status` stays."""
    out: list[str] = []
    for i, arg in enumerate(args):
        if arg == "--":
            return out + args[i:]
        following = args[i + 1] if i + 1 < len(args) else None
        bare = following is None or not FIELD_LIST.fullmatch(following)
        out.append(f"--json={ALL_FIELDS}" if arg == "--json" and bare else arg)
    return out


def selected(value: Any, fields: str | None) -> Any:
    """`value` (an object or a list of them) with only `fields` (comma-separated) kept; an
    unknown field is an error naming the known ones."""
    if fields is None or fields.strip() in ("", ALL_FIELDS):
        return value
    names = [f.strip() for f in fields.split(",") if f.strip()]
    items = value if isinstance(value, list) else [value]
    known = sorted({k for item in items if isinstance(item, dict) for k in item})
    unknown = [n for n in names if n not in known]
    if unknown and known:
        raise InvalidRequest(
            f"unknown JSON field {', '.join(unknown)}", hint=f"known fields: {', '.join(known)}"
        )

    def pick(item: Any) -> Any:
        return {n: item.get(n) for n in names} if isinstance(item, dict) else item

    return [pick(i) for i in value] if isinstance(value, list) else pick(value)


def print_json(value: Any, fields: str | None = ALL_FIELDS) -> None:
    """The one JSON printer of every command: all of `value`, or the `--json` fields of it."""
    with handled():
        typer.echo(json.dumps(selected(value, fields), indent=2, sort_keys=True))


def json_line(value: Any, fields: str | None = ALL_FIELDS) -> str:
    """One object a line (a followed stream), with the `--json` fields."""
    return json.dumps(selected(value, fields), sort_keys=True)


def examples(*lines: str) -> str:
    """A command's `--help` epilog: `Examples:` and one command a paragraph (Rich reflows
    single newlines)."""
    return "Examples:\n\n" + "\n\n".join(f"  $ {line}" for line in lines)


def width() -> int:
    """The terminal's columns (`COLUMNS` first), 80 when it cannot be told."""
    return shutil.get_terminal_size((80, 24)).columns


# Short ids, as docker takes them ---------------------------------------------------------------

FULL_ID = re.compile(r"[a-z]+-[0-9a-f]{8}")  # `ids.new_id`: a prefix and 8 hex digits
CANDIDATES = 5  # the most ids an ambiguity lists


def _prefixed(text: str, kind: str) -> str:
    """`c24` and `i-c24` both mean the instance ids starting `i-c24`."""
    value = text.strip().lower()
    return value if value.startswith(f"{kind}-") else f"{kind}-{value}"


def resolved(found: list[str], text: str, what: str) -> str:
    """The one id `found` for the prefix `text`, or a clear error (none, or which ones)."""
    if len(found) == 1:
        return found[0]
    if not found:
        raise NotFound(
            f"no {what} of yours starts with {text!r}", hint=f"`lowcostgpu {_ls_of(what)}`"
        )
    shown = ", ".join(found[:CANDIDATES]) + (", …" if len(found) > CANDIDATES else "")
    raise InvalidRequest(
        f"{text!r} names more than one {what}: {shown}", hint="give more of the id"
    )


def _ls_of(what: str) -> str:
    return "cluster ls" if what == "cluster" else "ls --all"


def instance_id(api: Client, text: str) -> str:
    """A whole instance id, or the one of this account that starts with `text` (one indexed
    request: `GET /v1/instances?id_prefix=`)."""
    if FULL_ID.fullmatch(text):
        return text
    prefix = _prefixed(text, "i")
    found = api.instances_with_prefix(prefix, limit=CANDIDATES + 1)
    return resolved([i["id"] for i in found], text, "instance")


def cluster_id(api: Client, text: str) -> str:
    """A whole cluster id, or the one of this account that starts with `text`."""
    if FULL_ID.fullmatch(text):
        return text
    found = ClusterApi(api).list(id_prefix=_prefixed(text, "c"))
    return resolved([c["id"] for c in found], text, "cluster")


def object_id(api: Client, text: str) -> str:
    """An `--object` filter: instance and cluster prefixes resolved, other ids (nodes,
    volumes, kind/id) as they are."""
    if "/" in text or FULL_ID.fullmatch(text):
        return text
    if text.startswith("i-"):
        return instance_id(api, text)
    if text.startswith("c-") and text.count("-") == 1:
        return cluster_id(api, text)
    return text


# Shell completion: quiet without a server -------------------------------------------------------


def complete_instance_ids(incomplete: str) -> list[str]:
    """The account's instance ids starting with what is typed; nothing (and no traceback) when
    no server answers or no key is set."""
    try:
        with client() as api:
            if incomplete:
                found = api.instances_with_prefix(_prefixed(incomplete, "i"), limit=50)
            else:
                found = api.instances(limit=50)
        return [i["id"] for i in found]
    except Exception:  # completion must never print a traceback into the shell
        return []


def complete_cluster_ids(incomplete: str) -> list[str]:
    try:
        with client() as api:
            found = ClusterApi(api).list(
                id_prefix=_prefixed(incomplete, "c") if incomplete else None
            )
        return [c["id"] for c in found]
    except Exception:  # completion must never print a traceback into the shell
        return []


def complete_gpu_types(incomplete: str) -> list[str]:
    """GPU type names from the price list; nothing without a server."""
    try:
        with client() as api:
            found = api.prices()
        names = [str(p["gpu"]) for p in found["gpus"]]
        return [n for n in names if n.startswith(incomplete.lower())]
    except Exception:  # completion must never print a traceback into the shell
        return []
