"""`events`: the account's events (all, one object's, one reason's, since a time), listed or
followed live. `--follow` starts at now (what happens next) unless `--since` or `--all` asks for
history first."""

from __future__ import annotations

import time
from typing import Annotated

import typer

from lowcostgpu.cli import format as fmt
from lowcostgpu.cli.context import (
    JsonCommand,
    JsonFields,
    client,
    complete_instance_ids,
    examples,
    handled,
    instance_id,
    json_line,
    object_id,
    print_json,
)
from lowcostgpu.cli.timeline import elapsed
from lowcostgpu.client.api import Client
from lowcostgpu.client.records import Event

PAGE = 1000
EXAMPLES = examples(
    "lowcostgpu events                          # every event of your account",
    "lowcostgpu events c24                      # one instance's (a unique start of its id)",
    "lowcostgpu events --object c-3f0a9b12 --since 1h",
    "lowcostgpu events -f                       # from now on; --all or --since 2d: history first",
    "lowcostgpu events --reason Preempted --json at,object_id,message",
)


def event_line(e: Event, origin: int | None) -> str:
    """One event at its local time; with one instance shown (`origin`, its creation), the time
    since it was created too and no object column."""
    at = fmt.local_time(e["at"], seconds=True)
    if origin is not None:
        return (
            f"{at}  {'+' + elapsed(e['at'] - origin):>8}  {e['type']:<7}  {e['reason']:<18}  "
            + (e["message"])
        )
    where = f"{e['object_kind']}/{e['object_id']}"
    return f"{at}  {e['type']:<7}  {e['reason']:<18}  {where}  {e['message']}"


def events(
    instance: Annotated[
        str | None,
        typer.Argument(
            help="an instance id or a unique start of one (as --instance)",
            show_default=False,
            autocompletion=complete_instance_ids,
        ),
    ] = None,
    instance_opt: Annotated[
        str | None,
        typer.Option("--instance", help="only this instance", autocompletion=complete_instance_ids),
    ] = None,
    object: Annotated[
        str | None,
        typer.Option("--object", help="only this object: an instance, cluster, node or volume id"),
    ] = None,
    reason: Annotated[str | None, typer.Option(help="only this reason, e.g. Preempted")] = None,
    since: Annotated[
        str | None, typer.Option(help="only events since: 30m, 1h, 2d, or a local time")
    ] = None,
    all: Annotated[bool, typer.Option("--all", help="with --follow: all history first")] = False,
    follow: Annotated[
        bool,
        typer.Option("--follow", "-f", help="keep printing new events from now (Ctrl-C stops)"),
    ] = False,
    as_json: JsonFields = None,
) -> None:
    """Your events in order: every queue, start, preemption, checkpoint, restart, end."""
    one_instance = instance_opt or instance
    with handled(), client() as api:
        target = _target(api, one_instance, object)
        origin = api.instance(target)["created_at"] if one_instance and target else None
        since_s = None if since is None else fmt.parse_since(since, time.time())
        after = 0
        if follow and since is None and not all:
            after = _latest_seq(api)
        else:
            found = _all(api, target, reason, since_s)
            if as_json and not follow:
                print_json(found, as_json)
                return
            for e in found:
                after = max(after, e["seq"] or 0)
                typer.echo(json_line(e, as_json) if as_json else event_line(e, origin))
        if not follow:
            return
        try:
            for e in api.follow_events(after, object=target, reason=reason, since=since_s):
                typer.echo(json_line(e, as_json) if as_json else event_line(e, origin))
        except KeyboardInterrupt:
            return


def _target(api: Client, one_instance: str | None, object: str | None) -> str | None:
    """The object filter, short ids resolved (an instance's through the indexed prefix query)."""
    if one_instance:
        return instance_id(api, one_instance)
    return None if object is None else object_id(api, object)


def _latest_seq(api: Client) -> int:
    """Where "from now" starts: the account's newest event (one row, `newest=true`)."""
    newest = api.events(0, 1, newest=True)
    return max((e["seq"] or 0 for e in newest), default=0)


def _all(api: Client, target: str | None, reason: str | None, since: int | None) -> list[Event]:
    """Every matching event, page after page."""
    found: list[Event] = []
    after = 0
    while True:
        page = api.events(after, PAGE, object=target, reason=reason, since=since)
        found.extend(page)
        if len(page) < PAGE:
            return found
        after = page[-1]["seq"] or after


def register(app: typer.Typer) -> None:
    app.command(cls=JsonCommand, epilog=EXAMPLES)(events)
