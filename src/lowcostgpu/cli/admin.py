"""`login`, `accounts create|ls`, `keys create`: credentials and accounts."""

from __future__ import annotations

from typing import Annotated

import typer

from lowcostgpu.cli.context import (
    admin_client,
    client,
    config_path,
    handled,
    print_json,
    server_url,
    setting,
    write_config,
)
from lowcostgpu.client.api import Client

AdminKey = Annotated[str | None, typer.Option(help="default: LOWCOSTGPU_ADMIN_KEY or config")]
accounts_app = typer.Typer(help="Accounts (admin key).", no_args_is_help=True)
keys_app = typer.Typer(help="API keys (admin key).", no_args_is_help=True)


def login(
    url: Annotated[str | None, typer.Option(help="the server, e.g. http://127.0.0.1:8080")] = None,
    api_key: Annotated[str | None, typer.Option(help="your account's API key")] = None,
    admin_key: AdminKey = None,
    create_account: Annotated[
        str | None, typer.Option(help="with --admin-key: make an account of this name and use it")
    ] = None,
) -> None:
    """Save the server URL and keys to the config file (checked against the server first)."""
    with handled():
        target = url or server_url()
        admin_key = admin_key or setting("admin_key")
        if create_account:
            with admin_client(admin_key, target) as admin:
                created = admin.create_account(create_account)
            api_key = created["api_key"]
            typer.echo(f"account {created['id']} ({created['name']}) created")
        if api_key:
            with Client(target, api_key) as api:
                me = api.account()
            typer.echo(
                f"logged in to {target} as {me['id']} ({me['name']}), balance ${me['balance']}"
            )
        elif admin_key:
            with admin_client(admin_key, target) as admin:
                admin.accounts()
            typer.echo(f"admin key accepted by {target}")
        else:
            Client(target).health()
        path = write_config({"url": target, "api_key": api_key or "", "admin_key": admin_key or ""})
    typer.echo(f"saved to {path}")


@accounts_app.command("create")
def create(
    name: str,
    admin_key: AdminKey = None,
    credit: Annotated[str | None, typer.Option(help="top it up with this many USD")] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Make an account; prints its first API key (shown once)."""
    with handled(), admin_client(admin_key) as admin:
        created = admin.create_account(name)
        if credit:
            balance = admin.topup(created["id"], credit)["balance"]
            created = {**created, "balance": balance}
    if as_json:
        print_json(created)
        return
    typer.echo(f"account {created['id']} ({created['name']}) · balance ${created['balance']}")
    typer.echo(f"api key (shown once): {created['api_key']}")


@accounts_app.command("ls")
def list_accounts(admin_key: AdminKey = None) -> None:
    """Every account with its balance."""
    with handled(), admin_client(admin_key) as admin:
        for a in admin.accounts():
            typer.echo(f"{a['id']}  {a['name']:<24}  ${a['balance']}")


@keys_app.command("create")
def create_key(account_id: str, admin_key: AdminKey = None) -> None:
    """Another API key for an account (shown once)."""
    with handled(), admin_client(admin_key) as admin:
        key = admin.create_key(account_id)
    typer.echo(f"api key for {account_id} (shown once): {key['api_key']}")


def whoami() -> None:
    """The account your key belongs to, and where the config lives."""
    with handled(), client() as api:
        me = api.account()
    typer.echo(f"{me['id']} ({me['name']}) at {api.url} · balance ${me['balance']}")
    typer.echo(f"config: {config_path()}")


def register(app: typer.Typer) -> None:
    app.command()(login)
    app.command()(whoami)
    app.add_typer(accounts_app, name="accounts")
    app.add_typer(keys_app, name="keys")
