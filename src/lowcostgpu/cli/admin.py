"""`login`, `accounts create|ls`, `keys create`: credentials and accounts."""

from __future__ import annotations

from typing import Annotated

import typer

from lowcostgpu.cli import format as fmt
from lowcostgpu.cli.context import (
    JsonCommand,
    JsonFields,
    admin_client,
    client,
    config_path,
    examples,
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
EXAMPLES = {
    "login": examples(
        "lowcostgpu login --url http://127.0.0.1:8080 --api-key lcg_…",
        "lowcostgpu login --admin-key $LOWCOSTGPU_ADMIN_KEY --create-account alice",
    ),
    "whoami": examples("lowcostgpu whoami", "lowcostgpu whoami --json id,balance"),
    "create": examples(
        "lowcostgpu accounts create alice --credit 20.00",
        "lowcostgpu accounts create alice --json id,api_key",
    ),
    "ls": examples("lowcostgpu accounts ls", "lowcostgpu accounts ls --json id,name,balance"),
    "keys": examples("lowcostgpu keys create acct-1a2b3c4d"),
}


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


@accounts_app.command("create", cls=JsonCommand, epilog=EXAMPLES["create"])
def create(
    name: str,
    admin_key: AdminKey = None,
    credit: Annotated[str | None, typer.Option(help="top it up with this many USD")] = None,
    as_json: JsonFields = None,
) -> None:
    """Make an account; prints its first API key (shown once)."""
    with handled(), admin_client(admin_key) as admin:
        created = admin.create_account(name)
        if credit:
            balance = admin.topup(created["id"], credit)["balance"]
            created = {**created, "balance": balance}
    if as_json:
        print_json(created, as_json)
        return
    typer.echo(
        f"account {created['id']} ({created['name']}) · balance {fmt.cents(created['balance'])}"
    )
    typer.echo(f"api key (shown once): {created['api_key']}")


@accounts_app.command("ls", cls=JsonCommand, epilog=EXAMPLES["ls"])
def list_accounts(admin_key: AdminKey = None, as_json: JsonFields = None) -> None:
    """Every account with its balance."""
    with handled(), admin_client(admin_key) as admin:
        found = admin.accounts()
    if as_json:
        print_json(found, as_json)
        return
    for a in found:
        typer.echo(f"{a['id']}  {a['name']:<24}  {fmt.cents(a['balance'])}")


@keys_app.command("create", cls=JsonCommand, epilog=EXAMPLES["keys"])
def create_key(account_id: str, admin_key: AdminKey = None, as_json: JsonFields = None) -> None:
    """Another API key for an account (shown once)."""
    with handled(), admin_client(admin_key) as admin:
        key = admin.create_key(account_id)
    if as_json:
        print_json(key, as_json)
        return
    typer.echo(f"api key for {account_id} (shown once): {key['api_key']}")


def whoami(as_json: JsonFields = None) -> None:
    """The account your key belongs to, and where the config lives."""
    with handled(), client() as api:
        me = api.account()
    if as_json:
        print_json(me, as_json)
        return
    typer.echo(f"{me['id']} ({me['name']}) at {api.url} · balance {fmt.cents(me['balance'])}")
    typer.echo(f"config: {config_path()}")


def register(app: typer.Typer) -> None:
    app.command(epilog=EXAMPLES["login"])(login)
    app.command(cls=JsonCommand, epilog=EXAMPLES["whoami"])(whoami)
    app.add_typer(accounts_app, name="accounts")
    app.add_typer(keys_app, name="keys")
