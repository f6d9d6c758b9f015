"""`launch`, `ls`, `show`, `logs`, `stop`, `resume`, `rm`: instances over the API."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from lowcostgpu.cli import volumes
from lowcostgpu.cli.context import client, handled, print_json
from lowcostgpu.cli.timeline import Timeline
from lowcostgpu.client.api import Instance
from lowcostgpu.domain.errors import InvalidRequest

JsonFlag = Annotated[bool, typer.Option("--json", help="print JSON")]


def parse_env(pairs: list[str]) -> dict[str, str]:
    env: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise InvalidRequest(
                f"--env {pair!r} is not KEY=VALUE", hint="e.g. --env WANDB_MODE=off"
            )
        env[key] = value
    return env


def launch(
    gpu: Annotated[str, typer.Option(help="GPU type, e.g. a100-sxm4 (see `lowcostgpu prices`)")],
    command: Annotated[
        list[str] | None, typer.Argument(help="after --: the command, or the template's arguments")
    ] = None,
    type: Annotated[
        str, typer.Option("--type", help="interruptible or on-demand")
    ] = "interruptible",
    template: Annotated[str | None, typer.Option(help="see `lowcostgpu templates`")] = None,
    volume: Annotated[str | None, typer.Option(help="NAME:SIZE, e.g. ckpts:50GB")] = None,
    env: Annotated[list[str] | None, typer.Option("--env", help="KEY=VALUE (repeatable)")] = None,
    region: Annotated[str | None, typer.Option(help="default: the first with that GPU")] = None,
    gpus: Annotated[int, typer.Option(help="GPUs for this instance")] = 1,
    auto_requeue: Annotated[
        bool, typer.Option("--auto-requeue/--no-auto-requeue", help="requeue after interruption")
    ] = True,
    grace_period_s: Annotated[int, typer.Option(help="SIGTERM to SIGKILL, 0 to 300")] = 300,
    wait: Annotated[bool, typer.Option(help="follow the timeline until the run ends")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Launch an instance (interruptible: queued at half price; on-demand: now or refused)."""
    with handled(), client() as api:
        inst = api.launch(
            gpu=gpu,
            type=type,
            gpus=gpus,
            region=region,
            template=template,
            command=list(command or []),
            env=parse_env(env or []),
            volume=volume,
            auto_requeue=auto_requeue,
            grace_period_s=grace_period_s,
        )
        volumes.say_held_checkpoint(inst, to_stderr=as_json)
        if as_json and not wait:
            print_json(inst)
            return
        if not wait:
            typer.echo(_launched(inst))
            return
        timeline = Timeline(api, inst, typer.echo)
        final = timeline.follow()
        usage = timeline.finish()
        if as_json:
            print_json({"instance": final, "usage": usage})
        if final["status"] != "succeeded":
            raise typer.Exit(1)


def _launched(inst: Instance) -> str:
    queue = inst.get("queue")
    if queue:
        eta = "unknown" if queue["eta_s"] is None else f"~{queue['eta_s']} s"
        return (
            f"✓ instance {inst['id']} queued · position {queue['position']} · ETA {eta}"
            f" · ${inst['price_per_hour']}/hr"
        )
    return f"✓ instance {inst['id']} {inst['status']} · ${inst['price_per_hour']}/hr"


def ls(
    all: Annotated[bool, typer.Option("--all", help="deleted instances too")] = False,
    limit: Annotated[int | None, typer.Option(min=1, help="only the newest N")] = None,
    status: Annotated[
        list[str] | None, typer.Option("--status", help="only this status (repeatable, or a,b)")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """List your instances, newest first (every page of them, unless --limit)."""
    with handled(), client() as api:
        found = api.instances(include_deleted=all, statuses=status or (), limit=limit)
    if as_json:
        print_json(found)
        return
    table = Table("id", "status", "type", "gpu", "gpus", "$/hr", "restarts", "checkpoint", "queue")
    for i in found:
        table.add_row(
            i["id"],
            i["status"],
            i["type"],
            f"{i['gpu']} ({i['region']})",
            str(i["gpus"]),
            i["price_per_hour"],
            str(i["restart_count"]),
            "-" if i["last_checkpoint_step"] is None else str(i["last_checkpoint_step"]),
            "-" if i["queue_position"] is None else f"#{i['queue_position']}",
        )
    Console().print(table)


def show(instance_id: str, as_json: JsonFlag = False) -> None:
    """One instance in detail."""
    with handled(), client() as api:
        inst = api.instance(instance_id)
    if as_json:
        print_json(inst)
        return
    for key, value in inst.items():
        typer.echo(f"{key:<22} {value}")


def logs(
    instance_id: str,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="stream until the run ends")
    ] = False,
    tail_bytes: Annotated[int, typer.Option(help="the last N bytes")] = 65536,
) -> None:
    """The output of the instance's latest run."""
    with handled(), client() as api:
        if not follow:
            typer.echo(api.logs(instance_id, tail_bytes), nl=False)
            return
        for chunk in api.follow_logs(instance_id, tail_bytes):
            typer.echo(chunk, nl=False)


def _act(verb: str, instance_id: str, as_json: bool) -> None:
    with handled(), client() as api:
        inst = {"stop": api.stop, "resume": api.resume, "rm": api.delete}[verb](instance_id)
    if as_json:
        print_json(inst)
    else:
        typer.echo(f"{inst['id']} {inst['status']}")


def stop(instance_id: str, as_json: JsonFlag = False) -> None:
    """Stop: SIGTERM, the grace period, then stopped (the volume is kept)."""
    _act("stop", instance_id, as_json)


def resume(instance_id: str, as_json: JsonFlag = False) -> None:
    """Resume a stopped or interrupted instance: back in the queue at its first place."""
    _act("resume", instance_id, as_json)


def rm(instance_id: str, as_json: JsonFlag = False) -> None:
    """Delete an instance (its volume stays: volumes are only deleted on purpose)."""
    _act("rm", instance_id, as_json)


def register(app: typer.Typer) -> None:
    extra = {"allow_interspersed_args": False}
    app.command(context_settings=extra)(launch)
    for command in (ls, show, logs, stop, resume, rm):
        app.command()(command)
