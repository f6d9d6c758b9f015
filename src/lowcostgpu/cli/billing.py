"""`prices`, `fleet`, `bill`, `balance`, `topup`: money and capacity over the API."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from lowcostgpu.cli.context import admin_client, client, handled, print_json, server_url
from lowcostgpu.client.api import Client

JsonFlag = Annotated[bool, typer.Option("--json", help="print JSON")]


def prices(as_json: JsonFlag = False) -> None:
    """The price list: on-demand, interruptible (exactly half), 100 GPU-hours, savings.

    Public: no key is sent, so that it works before `login` (with no config at all)."""
    with handled(), Client(server_url()) as api:
        found = api.prices()
    if as_json:
        print_json(found)
        return
    table = Table(
        "GPU", "on-demand $/h", "interruptible $/h", "cost of 100 GPU-h", "you save", title="USD"
    )
    for p in found["gpus"]:
        table.add_row(
            p["name"],
            f"${p['on_demand_per_gpu_hour']}",
            f"${p['interruptible_per_gpu_hour']}",
            f"${p['interruptible_100_gpu_hours']}",
            f"−${p['savings_100_gpu_hours']}",
        )
    Console().print(table)
    typer.echo(
        f"storage: ${found['storage_per_gb_month']} per GB-month, billed while a volume exists"
    )


def fleet(as_json: JsonFlag = False) -> None:
    """Pools, free GPUs, queue depth, and how often each GPU type is interrupted."""
    with handled(), client() as api:
        found = api.fleet()
    if as_json:
        print_json(found)
        return
    pools = Table("region", "gpu", "GPUs", "free", "on-demand", "interruptible", "queued")
    for p in found["pools"]:
        pools.add_row(
            p["region"],
            p["gpu_type"],
            str(p["gpus"]),
            str(p["free_gpus"]),
            str(p["on_demand_gpus"]),
            str(p["interruptible_gpus"]),
            f"{p['queue_depth']} ({p['queued_gpus']} GPUs)",
        )
    stats = Table("gpu", "interruptions", "median time between interruptions")
    for s in found["interruptions"]:
        median = s["median_time_between_interruptions_s"]
        stats.add_row(
            s["gpu_type"], str(s["interruptions"]), "-" if median is None else f"{median} s"
        )
    console = Console()
    console.print(pools)
    console.print(stats)


def bill(
    start: Annotated[int, typer.Option(help="period start, epoch seconds")] = 0,
    end: Annotated[
        int | None, typer.Option(help="period end, epoch seconds (default: now)")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Invoice lines (GPU, storage): exact amount, rounded at the line, savings, balance."""
    with handled(), client() as api:
        found = api.bill(start, end)
    if as_json:
        print_json(found)
        return
    table = Table("line", "exact", "amount", "saved vs on-demand")
    for line in found["lines"]:
        saved = f"${line['savings']}" if line["kind"] == "gpu" else "-"
        table.add_row(line["description"], f"${line['amount_exact']}", f"${line['amount']}", saved)
    Console().print(table)
    typer.echo(
        f"total ${found['total']} (exact ${found['total_exact']}) · saved ${found['savings']}"
        f" · balance ${found['balance']}"
    )


def balance(as_json: JsonFlag = False) -> None:
    """Your prepaid balance and its latest movements."""
    with handled(), client() as api:
        found = api.balance()
    if as_json:
        print_json(found)
        return
    typer.echo(f"balance ${found['balance']} (BalanceLow below ${found['low_balance_threshold']})")
    if not found["can_launch"]:
        typer.echo("new launches are refused until the account is topped up")
    for e in found["ledger"]:
        typer.echo(f"  {e['at']}  {e['kind']:<6}  {e['amount']:>14}  {e['memo']}")


def topup(
    account_id: Annotated[str, typer.Argument(help="the account to credit")],
    amount: Annotated[str, typer.Argument(help='USD, exact, e.g. "20.00"')],
    reference: Annotated[
        str | None, typer.Option(help="a payment reference: the same one credits once")
    ] = None,
    admin_key: Annotated[str | None, typer.Option(help="default: LOWCOSTGPU_ADMIN_KEY")] = None,
) -> None:
    """Credit an account's prepaid balance (an operator's action: needs the admin key)."""
    with handled(), admin_client(admin_key) as api:
        account = api.topup(account_id, amount, reference)
    typer.echo(f"{account['id']} balance ${account['balance']}")


def register(app: typer.Typer) -> None:
    for command in (prices, fleet, bill, balance, topup):
        app.command()(command)
