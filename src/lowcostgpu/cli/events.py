"""`events`: the account's events (all, one instance's, one reason's), listed or followed live."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from lowcostgpu.cli.context import client, handled, print_json
from lowcostgpu.cli.timeline import elapsed
from lowcostgpu.client.api import Client, Event

PAGE = 1000


def _line(e: Event, origin: int | None) -> str:
    """One event; times relative to the instance's creation when one instance is shown."""
    at = elapsed(e["at"] - origin) if origin is not None else str(e["at"])
    where = "" if origin is not None else f"{e['object_kind']}/{e['object_id']}  "
    return f"{at:>10}  {e['type']:<7}  {e['reason']:<18}  {where}{e['message']}"


def events(
    instance_id: Annotated[
        str | None, typer.Argument(help="an instance id (same as --instance)", show_default=False)
    ] = None,
    instance: Annotated[str | None, typer.Option("--instance", help="only this instance")] = None,
    reason: Annotated[str | None, typer.Option(help="only this reason, e.g. Preempted")] = None,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="keep printing new events (Ctrl-C stops)")
    ] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="JSON (one object a line with -f)")
    ] = False,
) -> None:
    """Your events in order: every queue, start, preemption, checkpoint, restart, end."""
    target = instance or instance_id
    with handled(), client() as api:
        origin = api.instance(target)["created_at"] if target else None
        found = _all(api, target, reason)
        if as_json and not follow:
            print_json(found)
            return
        after = 0
        for e in found:
            after = max(after, e["seq"] or 0)
            typer.echo(json.dumps(e, sort_keys=True) if as_json else _line(e, origin))
        if not follow:
            return
        try:
            for e in api.follow_events(after, object=target, reason=reason):
                typer.echo(json.dumps(e, sort_keys=True) if as_json else _line(e, origin))
        except KeyboardInterrupt:
            return


def _all(api: Client, target: str | None, reason: str | None) -> list[Event]:
    """Every matching event, page after page."""
    found: list[Event] = []
    after = 0
    while True:
        page = api.events(after, PAGE, object=target, reason=reason)
        found.extend(page)
        if len(page) < PAGE:
            return found
        after = page[-1]["seq"] or after


def register(app: typer.Typer) -> None:
    app.command()(events)
