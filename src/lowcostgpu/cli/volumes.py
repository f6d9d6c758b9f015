"""`volumes ls|show|rm|resize`: the account's volumes over the API; and what `launch` says of one.

A volume is made by the first launch that names it with a size (`--volume ckpts:50GB`) and
attached by later ones (`--volume ckpts`); it is billed while it exists, so `volumes rm` is how
its storage stops being billed.
"""

from __future__ import annotations

import time
from typing import Annotated

import typer

from lowcostgpu.cli import format as fmt
from lowcostgpu.cli.context import (
    JsonCommand,
    JsonFields,
    client,
    examples,
    handled,
    print_json,
    width,
)
from lowcostgpu.client.records import Instance
from lowcostgpu.client.volumes import Volume, VolumeApi
from lowcostgpu.domain.volumes import parse_size

volumes_app = typer.Typer(
    help="Volumes: what your runs keep across interruptions (billed while they exist).",
    epilog=examples(
        "lowcostgpu volumes ls",
        "lowcostgpu volumes show ckpts",
        "lowcostgpu volumes resize ckpts 100GB",
        "lowcostgpu volumes rm ckpts",
    ),
    no_args_is_help=True,
)
LS_COLUMNS = (
    fmt.Column("NAME", 0),
    fmt.Column("SIZE", 0, right=True),
    fmt.Column("CHECKPOINT", 1, right=True),
    fmt.Column("IN USE BY", 2),
    fmt.Column("CREATED", 3),
)


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


def lines_of(v: Volume, now_s: float) -> list[str]:
    """`show` as aligned key-value lines."""
    step = v["checkpoint_step"]
    return fmt.aligned(
        [
            ("name", v["name"]),
            ("size", f"{v['size_gb']} GB"),
            ("created", fmt.when(v["created_at"], now_s)),
            ("resized", fmt.when(v["resized_at"], now_s)),
            ("in use by", ", ".join(v["in_use_by"]) or fmt.NONE),
            ("checkpoint", fmt.NONE if step is None else f"step {step}"),
        ]
    )


def ls_lines(found: list[Volume], now_s: float, columns: int) -> list[str]:
    """One row per volume, within `columns` by dropping columns (names and ids stay whole)."""
    rows = [
        [
            v["name"],
            f"{v['size_gb']} GB",
            fmt.NONE if v["checkpoint_step"] is None else f"step {v['checkpoint_step']}",
            ", ".join(v["in_use_by"]) or fmt.NONE,
            fmt.ago(v["created_at"], now_s),
        ]
        for v in found
    ]
    return fmt.fitted(LS_COLUMNS, rows, columns)


@volumes_app.command(
    "ls",
    cls=JsonCommand,
    epilog=examples("lowcostgpu volumes ls", "lowcostgpu volumes ls --json name,size_gb"),
)
def ls(as_json: JsonFields = None) -> None:
    """Your volumes, one row each, with the instances that use them."""
    with handled(), client() as api:
        found = VolumeApi(api).list()
    if as_json:
        print_json(found, as_json)
        return
    if not found:
        typer.echo("no volumes (a launch with --volume NAME:SIZEGB makes one)")
        return
    for line in ls_lines(found, time.time(), width()):
        typer.echo(line)


@volumes_app.command(
    "show",
    cls=JsonCommand,
    epilog=examples(
        "lowcostgpu volumes show ckpts", "lowcostgpu volumes show ckpts --json in_use_by"
    ),
)
def show(name: str, as_json: JsonFields = None) -> None:
    """One volume: size, when it was made and resized, who uses it, its last checkpoint."""
    with handled(), client() as api:
        found = VolumeApi(api).get(name)
    _print(found, as_json)


@volumes_app.command(
    "resize", cls=JsonCommand, epilog=examples("lowcostgpu volumes resize ckpts 100GB")
)
def resize(
    name: str,
    size: Annotated[str, typer.Argument(help="the new size with its unit, e.g. 100GB")],
    as_json: JsonFields = None,
) -> None:
    """Grow a volume (never shrink): billed at the new size from now on."""
    with handled():
        size_gb = parse_size(size)
        with client() as api:
            found = VolumeApi(api).resize(name, size_gb)
    if not as_json:
        typer.echo(f"volume {name} is {found['size_gb']} GB")
    _print(found, as_json, quiet=True)


@volumes_app.command("rm", cls=JsonCommand, epilog=examples("lowcostgpu volumes rm ckpts"))
def rm(name: str, as_json: JsonFields = None) -> None:
    """Delete a volume and its data; its storage stops being billed. Refused while one of your
    instances (not deleted) uses it."""
    with handled(), client() as api:
        found = VolumeApi(api).delete(name)
    if as_json:
        print_json(found, as_json)
        return
    typer.echo(f"volume {name} deleted; its storage is no longer billed")


def _print(found: Volume, as_json: str | None, quiet: bool = False) -> None:
    if as_json:
        print_json(found, as_json)
    elif not quiet:
        for line in lines_of(found, time.time()):
            typer.echo(line)


def register(app: typer.Typer) -> None:
    app.add_typer(volumes_app, name="volumes")
