"""`webhooks add|ls|rm|test|deliveries|replay|enable`: where your events are POSTed, signed."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from lowcostgpu.cli.context import JsonCommand, JsonFields, client, examples, handled, print_json

app = typer.Typer(help="Webhooks: your events POSTed to your URL (Standard Webhooks signatures).")


def _show(hook: dict[str, Any]) -> str:
    reasons = ",".join(hook["reasons"]) or "all events"
    why = f"  ({hook['disabled_reason']})" if hook["disabled_reason"] else ""
    return f"{hook['id']}  {hook['status']:<8}  {hook['url']}  [{reasons}]{why}"


@app.command(
    cls=JsonCommand,
    epilog=examples(
        "lowcostgpu webhooks add https://example.com/hook",
        "lowcostgpu webhooks add https://example.com/hook --reason Preempted --reason Succeeded",
    ),
)
def add(
    url: str,
    reason: Annotated[
        list[str] | None, typer.Option(help="only this reason (repeatable); default: all")
    ] = None,
    as_json: JsonFields = None,
) -> None:
    """Add an endpoint; its signing secret is printed this once."""
    with handled(), client() as api:
        hook = api.create_webhook(url, reason or [])
    if as_json:
        print_json(hook, as_json)
        return
    typer.echo(_show(hook))
    typer.echo(f"secret (shown once, verify signatures with it): {hook['secret']}")


@app.command(
    "ls",
    cls=JsonCommand,
    epilog=examples("lowcostgpu webhooks ls", "lowcostgpu webhooks ls --json id,status,url"),
)
def listing(as_json: JsonFields = None) -> None:
    """Your endpoints."""
    with handled(), client() as api:
        hooks = api.webhooks()
    if as_json:
        print_json(hooks, as_json)
        return
    for hook in hooks:
        typer.echo(_show(hook))


def _action(webhook_id: str, action: str, as_json: str | None) -> None:
    with handled(), client() as api:
        answer = api.webhook_action(webhook_id, action)
    if as_json:
        print_json(answer, as_json)
    elif action == "test":
        typer.echo(f"queued test message {answer['message_id']}")
    else:
        typer.echo(_show(answer))


@app.command(cls=JsonCommand, epilog=examples("lowcostgpu webhooks rm wh-1a2b3c4d5e6f"))
def rm(webhook_id: str, as_json: JsonFields = None) -> None:
    """Delete an endpoint (nothing more is sent to it)."""
    _action(webhook_id, "rm", as_json)


@app.command(cls=JsonCommand, epilog=examples("lowcostgpu webhooks test wh-1a2b3c4d5e6f"))
def test(webhook_id: str, as_json: JsonFields = None) -> None:
    """Send a `webhook.test` message ahead of the endpoint's queue."""
    _action(webhook_id, "test", as_json)


@app.command(cls=JsonCommand, epilog=examples("lowcostgpu webhooks enable wh-1a2b3c4d5e6f"))
def enable(webhook_id: str, as_json: JsonFields = None) -> None:
    """Enable a disabled endpoint: what it missed goes out, in order."""
    _action(webhook_id, "enable", as_json)


@app.command(
    cls=JsonCommand,
    epilog=examples("lowcostgpu webhooks deliveries wh-1a2b3c4d5e6f --json id,status,attempts"),
)
def deliveries(webhook_id: str, as_json: JsonFields = None) -> None:
    """Every delivery with its attempts (status, latency, error)."""
    with handled(), client() as api:
        found = api.deliveries(webhook_id)
    if as_json:
        print_json(found, as_json)
        return
    for d in found:
        last = d["tries"][-1] if d["tries"] else None
        answer = "" if last is None else f"{last['status_code'] or last['error'][:40]}"
        typer.echo(
            f"{d['id']}  {d['status']:<9}  {d['payload']['type']:<24}  "
            f"tries {d['attempts']}  {answer}"
        )


@app.command(
    cls=JsonCommand, epilog=examples("lowcostgpu webhooks replay wh-1a2b3c4d5e6f DELIVERY_ID")
)
def replay(webhook_id: str, delivery_id: str, as_json: JsonFields = None) -> None:
    """Send a delivery again (same webhook-id), at its place in the order."""
    with handled(), client() as api:
        answer = api.replay(webhook_id, delivery_id)
    if as_json:
        print_json(answer, as_json)
    else:
        typer.echo(f"replaying {answer['id']} ({answer['message_id']})")


def register(main: typer.Typer) -> None:
    main.add_typer(app, name="webhooks")
