"""`login`, `accounts create|ls`, `keys create`: credentials and accounts."""

from __future__ import annotations

import sys
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
from lowcostgpu.domain.errors import Unauthenticated

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


LOGIN_FLAGS = "--api-key KEY, or --admin-key KEY --create-account NAME"


def interactive() -> bool:
    """Whether `login` may ask for what is missing: stdin is a terminal (a script or a pipe
    gets an error naming the flags instead of a prompt that would hang)."""
    return sys.stdin.isatty()


def login(
    url: Annotated[str | None, typer.Option(help="the server, e.g. http://127.0.0.1:8080")] = None,
    api_key: Annotated[str | None, typer.Option(help="your account's API key")] = None,
    admin_key: AdminKey = None,
    create_account: Annotated[
        str | None, typer.Option(help="with --admin-key: make an account of this name and use it")
    ] = None,
) -> None:
    """Save the server URL and keys to the config file (checked against the server first).

    What is missing is asked for at a terminal (the URL, then the API key, hidden; an empty key
    creates an account with the admin key); a config without a key is never saved.
    """
    with handled():
        asking = interactive()
        target = url or (_ask_url() if asking else server_url())
        if not (api_key or create_account or admin_key):
            api_key, admin_key, create_account = _ask_credentials(asking)
        admin_key = admin_key or setting("admin_key")
        if create_account and not admin_key and asking:
            admin_key = _ask_hidden("Admin key (input hidden)") or None
        api_key = _checked(target, api_key, admin_key, create_account)
        path = write_config({"url": target, "api_key": api_key or "", "admin_key": admin_key or ""})
    typer.echo(f"saved to {path}")


def _ask_url() -> str:
    return str(typer.prompt("Server URL", default=server_url())).strip() or server_url()


def _ask_credentials(asking: bool) -> tuple[str | None, str | None, str | None]:
    """(api key, admin key, account to create) from the terminal; no terminal, or nothing
    given at it, is an error naming the flags, so that nothing is saved without a key."""
    if not asking:
        raise Unauthenticated(
            "login needs a key and stdin is not a terminal", hint=f"pass {LOGIN_FLAGS}"
        )
    api_key = _ask_hidden("API key (input hidden; empty: create an account with the admin key)")
    if api_key:
        return api_key, None, None
    admin_key = setting("admin_key") or _ask_hidden(
        "Admin key (input hidden; printed by `lowcostgpu serve`)"
    )
    if not admin_key:
        raise Unauthenticated(
            "no API key and no admin key given: nothing saved", hint=f"pass {LOGIN_FLAGS}"
        )
    name = str(typer.prompt("Name of the account to create")).strip()
    return None, admin_key, name


def _ask_hidden(question: str) -> str:
    """A hidden answer; empty is an answer (the caller says what it means), not a re-ask."""
    return str(typer.prompt(question, default="", show_default=False, hide_input=True)).strip()


def _checked(
    target: str, api_key: str | None, admin_key: str | None, create_account: str | None
) -> str | None:
    """Each key tried on the server before anything is saved; the account made if asked.
    Returns the API key to save (the new account's when one was made)."""
    if create_account:
        with admin_client(admin_key, target) as admin:
            created = admin.create_account(create_account)
        api_key = created["api_key"]
        typer.echo(f"account {created['id']} ({created['name']}) created")
    if api_key:
        with Client(target, api_key) as api:
            me = api.account()
        typer.echo(
            f"logged in to {target} as {me['id']} ({me['name']}),"
            f" balance {fmt.cents(me['balance'])}"
        )
    elif admin_key:
        with admin_client(admin_key, target) as admin:
            admin.accounts()
        typer.echo(f"admin key accepted by {target}")
    else:
        raise Unauthenticated("login needs a key: nothing saved", hint=f"pass {LOGIN_FLAGS}")
    return api_key


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
