"""`volumes ls|show|rm|resize`: the account's volumes over the API; and what `launch` says of one.

A volume is made by the first launch that names it with a size (`--volume ckpts:50GB`) and
attached by later ones (`--volume ckpts`); it is billed while it exists, so `volumes rm` is how
its storage stops being billed.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from lowcostgpu.cli.context import client, handled, print_json
from lowcostgpu.client.api import Instance, Volume, VolumeApi
from lowcostgpu.domain.volumes import parse_size

volumes_app = typer.Typer(
    help="Volumes: what your runs keep across interruptions (billed while they exist).\n\n"
    "Examples:\n\n"
    "  lowcostgpu volumes ls\n\n"
    "  lowcostgpu volumes show ckpts\n\n"
    "  lowcostgpu volumes resize ckpts 100GB\n\n"
    "  lowcostgpu volumes rm ckpts",
    no_args_is_help=True,
)
JsonFlag = Annotated[bool, typer.Option("--json", help="print JSON")]


def held_checkpoint_line(inst: Instance) -> str | None:
    """What a launch says when the volume it attached already holds checkpoints: the run will
    resume from them (a new run on an old volume is not silently an old run's continuation)."""
    step = inst.get("volume_checkpoint_step")
    volume = inst.get("volume")
    if step is None or not volume:
        return None
    name = volume.split(":", 1)[0]
    return f"volume {name} holds checkpoint step {step}: the run resumes from it"


def say_held_checkpoint(inst: Instance, to_stderr: bool = False) -> None:
    """`launch`'s hook: the line above, if any (on stderr when stdout carries JSON)."""
    line = held_checkpoint_line(inst)
    if line is not None:
        typer.echo(line, err=to_stderr)


def when(at: int | None) -> str:
    """A time as local ISO (minutes), `-` for none."""
    if at is None:
        return "-"
    return datetime.fromtimestamp(at).astimezone().strftime("%Y-%m-%d %H:%M")


def lines_of(v: Volume) -> list[str]:
    """`show` as aligned key-value lines."""
    pairs = [
        ("name", v["name"]),
        ("size", f"{v['size_gb']} GB"),
        ("created", when(v["created_at"])),
        ("resized", when(v["resized_at"])),
        ("in use by", ", ".join(v["in_use_by"]) or "-"),
        ("checkpoint", "-" if v["checkpoint_step"] is None else f"step {v['checkpoint_step']}"),
    ]
    width = max(len(k) for k, _ in pairs)
    return [f"{k:<{width}}  {value}" for k, value in pairs]


@volumes_app.command("ls")
def ls(as_json: JsonFlag = False) -> None:
    """Your volumes, one row each, with the instances that use them.

    Example: lowcostgpu volumes ls"""
    with handled(), client() as api:
        found = VolumeApi(api).list()
    if as_json:
        print_json(found)
        return
    if not found:
        typer.echo("no volumes (a launch with --volume NAME:SIZEGB makes one)")
        return
    table = Table("name", "size", "created", "in use by", "checkpoint")
    for v in found:
        step = v["checkpoint_step"]
        table.add_row(
            v["name"],
            f"{v['size_gb']} GB",
            when(v["created_at"]),
            ", ".join(v["in_use_by"]) or "-",
            "-" if step is None else f"step {step}",
        )
    Console(soft_wrap=True).print(table)


@volumes_app.command("show")
def show(name: str, as_json: JsonFlag = False) -> None:
    """One volume: size, when it was made and resized, who uses it, its last checkpoint.

    Example: lowcostgpu volumes show ckpts"""
    with handled(), client() as api:
        found = VolumeApi(api).get(name)
    _print(found, as_json)


@volumes_app.command("resize")
def resize(
    name: str,
    size: Annotated[str, typer.Argument(help="the new size with its unit, e.g. 100GB")],
    as_json: JsonFlag = False,
) -> None:
    """Grow a volume (never shrink): billed at the new size from now on.

    Example: lowcostgpu volumes resize ckpts 100GB"""
    with handled():
        size_gb = parse_size(size)
        with client() as api:
            found = VolumeApi(api).resize(name, size_gb)
    if not as_json:
        typer.echo(f"volume {name} is {found['size_gb']} GB")
    _print(found, as_json, quiet=True)


@volumes_app.command("rm")
def rm(name: str, as_json: JsonFlag = False) -> None:
    """Delete a volume and its data; its storage stops being billed. Refused while one of your
    instances (not deleted) uses it.

    Example: lowcostgpu volumes rm ckpts"""
    with handled(), client() as api:
        found = VolumeApi(api).delete(name)
    if as_json:
        print_json(found)
        return
    typer.echo(f"volume {name} deleted; its storage is no longer billed")


def _print(found: Volume, as_json: bool, quiet: bool = False) -> None:
    if as_json:
        print_json(found)
    elif not quiet:
        for line in lines_of(found):
            typer.echo(line)


def register(app: typer.Typer) -> None:
    app.add_typer(volumes_app, name="volumes")
