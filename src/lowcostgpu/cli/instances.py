"""`launch`, `ls`, `show`, `logs`, `stop`, `resume`, `rm`: instances over the API."""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer

from lowcostgpu.cli import format as fmt
from lowcostgpu.cli import volumes
from lowcostgpu.cli.context import (
    JsonCommand,
    JsonFields,
    client,
    complete_gpu_types,
    complete_instance_ids,
    examples,
    handled,
    instance_id,
    print_json,
    width,
)
from lowcostgpu.cli.wait import launched_line
from lowcostgpu.cli.wait import wait as wait_for
from lowcostgpu.client.records import Instance
from lowcostgpu.domain.errors import IllegalTransition, InvalidRequest
from lowcostgpu.domain.status import INSTANCE_TRANSITIONS, InstanceStatus

InstanceId = Annotated[
    str,
    typer.Argument(
        help="an instance id, or a unique start of one (i-c24, c24)",
        autocompletion=complete_instance_ids,
        show_default=False,
    ),
]
EXAMPLES = {
    "launch": examples(
        "lowcostgpu launch --gpu a100-sxm4 -- python train.py",
        "lowcostgpu launch --gpu a100-sxm4 --volume ckpts:50GB --template pytorch --wait",
        "lowcostgpu launch --gpu a100-sxm4 --json id,status -- sleep 60",
    ),
    "ls": examples(
        "lowcostgpu ls",
        "lowcostgpu ls --status running,queued --limit 10",
        "lowcostgpu ls --json id,status,gpu",
    ),
    "show": examples(
        "lowcostgpu show i-c24f09a1",
        "lowcostgpu show c24            # a unique start of the id",
        "lowcostgpu show c24 --json status,last_checkpoint_step",
    ),
    "logs": examples("lowcostgpu logs c24", "lowcostgpu logs -f c24 --tail-bytes 4096"),
    "stop": examples("lowcostgpu stop c24", "lowcostgpu stop c24 --json status"),
    "resume": examples("lowcostgpu resume c24"),
    "rm": examples("lowcostgpu rm c24"),
}


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
    gpu: Annotated[
        str,
        typer.Option(
            help="GPU type, e.g. a100-sxm4 (see `lowcostgpu prices`)",
            autocompletion=complete_gpu_types,
        ),
    ],
    command: Annotated[
        list[str] | None, typer.Argument(help="after --: the command, or the template's arguments")
    ] = None,
    type: Annotated[
        str, typer.Option("--type", help="interruptible or on-demand")
    ] = "interruptible",
    template: Annotated[str | None, typer.Option(help="see `lowcostgpu templates`")] = None,
    volume: Annotated[
        str | None, typer.Option(help="NAME:SIZE makes one (ckpts:50GB); NAME attaches yours")
    ] = None,
    env: Annotated[list[str] | None, typer.Option("--env", help="KEY=VALUE (repeatable)")] = None,
    region: Annotated[str | None, typer.Option(help="default: the first with that GPU")] = None,
    gpus: Annotated[int, typer.Option(help="GPUs for this instance (per node)")] = 1,
    nodes: Annotated[
        int, typer.Option(help="hosts of `--gpus` each, placed at once (multi-node, torchrun)")
    ] = 1,
    hold_survivors_s: Annotated[
        int,
        typer.Option(
            help="multi-node: after a reclaim, keep its other hosts this long (billed) so that "
            "it restarts when one more host frees; 0 (off) to grace + 300"
        ),
    ] = 0,
    auto_requeue: Annotated[
        bool, typer.Option("--auto-requeue/--no-auto-requeue", help="requeue after interruption")
    ] = True,
    grace_period_s: Annotated[int, typer.Option(help="SIGTERM to SIGKILL, 0 to 300")] = 300,
    wait: Annotated[bool, typer.Option(help="follow the timeline until the run ends")] = False,
    as_json: JsonFields = None,
) -> None:
    """Launch an instance (interruptible: queued at half price; on-demand: now or refused)."""
    with handled(), client() as api:
        inst = api.launch(
            gpu=gpu,
            type=type,
            gpus=gpus,
            **({"nodes": nodes} if nodes != 1 else {}),
            **({"hold_survivors_s": hold_survivors_s} if hold_survivors_s else {}),
            region=region,
            template=template,
            command=list(command or []),
            env=parse_env(env or []),
            volume=volume,
            auto_requeue=auto_requeue,
            grace_period_s=grace_period_s,
        )
        volumes.say_held_checkpoint(inst, to_stderr=bool(as_json))
        if as_json and not wait:
            print_json(inst, as_json)
            return
        if not wait:
            typer.echo(_launched(inst))
            return
        final, usage = wait_for(api, inst)
        if as_json:
            print_json({"instance": final, "usage": usage}, as_json)
        if final["status"] != "succeeded":
            raise typer.Exit(1)


def _launched(inst: Instance) -> str:
    return launched_line(inst)


LS_COLUMNS = (
    fmt.Column("ID", 0),
    fmt.Column("STATUS", 0),
    fmt.Column("AGE", 1),
    fmt.Column("GPU", 2),
    fmt.Column("$/HR", 3, right=True),
    fmt.Column("TYPE", 5),
    fmt.Column("REGION", 7),
    fmt.Column("RESTARTS", 8, right=True),
    fmt.Column("CHECKPOINT", 6, right=True),
    fmt.Column("QUEUE", 4, right=True),
)


def ls_row(i: Instance, now_s: float) -> list[str]:
    """One instance as `ls` shows it (the columns of `LS_COLUMNS`)."""
    step = i["last_checkpoint_step"]
    return [
        i["id"],
        i["status"],
        fmt.ago(i["created_at"], now_s),
        gpu_column(i),
        f"${i['price_per_hour']}",
        i["type"],
        i["region"],
        str(i["restart_count"]),
        fmt.NONE if step is None else str(step),
        fmt.NONE if i["queue_position"] is None else f"#{i['queue_position']}",
    ]


def gpu_column(i: Instance) -> str:
    """The GPU type, × GPUs when several, and × hosts for a multi-node instance."""
    text = i["gpu"] if i["gpus"] == 1 else f"{i['gpu']} ×{i['gpus']}"
    nodes = i.get("nodes", 1)
    return text if nodes == 1 else f"{text} ×{nodes} nodes"


def ls_lines(found: list[Instance], now_s: float, columns: int) -> list[str]:
    """Newest first; within `columns` by dropping the least useful columns, never cutting ids."""
    rows = [ls_row(i, now_s) for i in found]
    return fmt.fitted(LS_COLUMNS, rows, columns)


def ls(
    all: Annotated[bool, typer.Option("--all", help="deleted instances too")] = False,
    limit: Annotated[int | None, typer.Option(min=1, help="only the newest N")] = None,
    status: Annotated[
        list[str] | None, typer.Option("--status", help="only this status (repeatable, or a,b)")
    ] = None,
    as_json: JsonFields = None,
) -> None:
    """List your instances, newest first (every page of them, unless --limit)."""
    with handled(), client() as api:
        found = api.instances(include_deleted=all, statuses=status or (), limit=limit)
    if as_json:
        print_json(found, as_json)
        return
    if not found:
        typer.echo(
            "no instance has that status"
            if status
            else "no instances (launch one: lowcostgpu launch --gpu a100-sxm4 -- CMD)"
        )
        return
    for line in ls_lines(found, time.time(), width()):
        typer.echo(line)


TIME_KEYS = frozenset({"created_at", "notice_at", "deadline", "eta_at"})


def readable(value: dict[str, Any], now_s: float) -> dict[str, Any]:
    """An API object with its times local and relative, durations and prices in words."""
    out: dict[str, Any] = {}
    for key, item in value.items():
        if isinstance(item, dict):
            out[key] = readable(item, now_s)
        elif key in TIME_KEYS and isinstance(item, int):
            out[key] = fmt.when(item, now_s)
        elif key.endswith("_s") and (item is None or isinstance(item, int | float)):
            out[key[:-2]] = fmt.duration(item)
        elif key == "price_per_hour":
            out[key] = fmt.rate(item)
        else:
            out[key] = item
    return out


def show_lines(inst: Instance | dict[str, Any], now_s: float) -> list[str]:
    """Aligned `key  value` lines; nested values dotted (`queue.position`), `-` for none."""
    return fmt.aligned(fmt.flatten(readable(dict(inst), now_s)))


def show(instance: InstanceId, as_json: JsonFields = None) -> None:
    """One instance in detail."""
    with handled(), client() as api:
        inst = api.instance(instance_id(api, instance))
    if as_json:
        print_json(inst, as_json)
        return
    for line in show_lines(inst, time.time()):
        typer.echo(line)


def logs(
    instance: InstanceId,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="stream until the run ends")
    ] = False,
    tail_bytes: Annotated[int, typer.Option(help="the last N bytes")] = 65536,
    previous: Annotated[
        bool, typer.Option("--previous", help="the run before the latest (e.g. before a restart)")
    ] = False,
    run: Annotated[
        int | None,
        typer.Option("--run", min=0, help="the run of restart count N (0 = the first run)"),
    ] = None,
) -> None:
    """The output of the instance's latest run, or of an earlier one (--previous, --run N)."""
    with handled(), client() as api:
        if follow and (previous or run is not None):
            raise InvalidRequest(
                "--follow streams the latest run only",
                hint="leave out --follow to read an earlier run",
            )
        target = instance_id(api, instance)
        if not follow:
            typer.echo(api.logs(target, tail_bytes, run=run, previous=previous), nl=False)
            return
        for chunk in api.follow_logs(target, tail_bytes):
            typer.echo(chunk, nl=False)


# The statuses each action leads to: a refused one says which statuses it takes, from the table.
LEADS_TO = {
    "stop": {InstanceStatus.STOPPING, InstanceStatus.STOPPED},
    "resume": {InstanceStatus.QUEUED},
    "rm": {InstanceStatus.DELETED},
}


def refused(verb: str, target: str, exc: IllegalTransition) -> InvalidRequest:
    """A refused stop/resume/rm in the user's words (`i-… is running: resume takes an instance
    that is interrupted, stopped or failed`), not the state machine's edges."""
    takes = [str(s) for s, nexts in INSTANCE_TRANSITIONS.items() if nexts & LEADS_TO[verb]]
    either = " or ".join([", ".join(takes[:-1]), takes[-1]] if len(takes) > 1 else takes)
    current = exc.details.get("current", "in another state")
    return InvalidRequest(
        f"{target} is {current}: {verb} takes an instance that is {either}",
        hint=f"`lowcostgpu show {target}` shows where it is",
    )


def _act(verb: str, instance: str, as_json: str | None) -> None:
    with handled(), client() as api:
        target = instance_id(api, instance)
        try:
            inst = {"stop": api.stop, "resume": api.resume, "rm": api.delete}[verb](target)
        except IllegalTransition as exc:
            raise refused(verb, target, exc) from None
    if as_json:
        print_json(inst, as_json)
    else:
        typer.echo(f"{inst['id']} {inst['status']}")


def stop(instance: InstanceId, as_json: JsonFields = None) -> None:
    """Stop: SIGTERM, the grace period, then stopped (the volume is kept)."""
    _act("stop", instance, as_json)


def resume(instance: InstanceId, as_json: JsonFields = None) -> None:
    """Resume a stopped or interrupted instance: back in the queue at its first place."""
    _act("resume", instance, as_json)


def rm(instance: InstanceId, as_json: JsonFields = None) -> None:
    """Delete an instance (its volume stays: volumes are only deleted on purpose)."""
    _act("rm", instance, as_json)


def register(app: typer.Typer) -> None:
    extra = {"allow_interspersed_args": False}
    app.command(context_settings=extra, cls=JsonCommand, epilog=EXAMPLES["launch"])(launch)
    for command in (ls, show, logs, stop, resume, rm):
        app.command(cls=JsonCommand, epilog=EXAMPLES[command.__name__])(command)
