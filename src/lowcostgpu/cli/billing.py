"""`prices`, `fleet`, `bill`, `balance`, `topup`: money and capacity over the API.

Amounts are shown to the cent as the bill rounds them (`cli.format`); `--exact` adds every
digit, and `--json` always has them.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from lowcostgpu.cli import format as fmt
from lowcostgpu.cli.context import (
    JsonCommand,
    JsonFields,
    admin_client,
    client,
    examples,
    handled,
    print_json,
    server_url,
)
from lowcostgpu.client.api import Client
from lowcostgpu.domain.errors import InvalidRequest

ExactFlag = Annotated[bool, typer.Option("--exact", help="the exact amounts too, every digit")]
EXAMPLES = {
    "prices": examples("lowcostgpu prices", "lowcostgpu prices --json gpus"),
    "fleet": examples("lowcostgpu fleet", "lowcostgpu fleet --json interruptions"),
    "bill": examples(
        "lowcostgpu bill                       # every usage until now",
        "lowcostgpu bill --month 2026-11",
        "lowcostgpu bill --start 2026-11-15 --end 2026-11-16T12:00 --exact",
        "lowcostgpu bill --json total,total_exact",
    ),
    "balance": examples("lowcostgpu balance", "lowcostgpu balance --exact --json balance"),
    "topup": examples("lowcostgpu topup acct-1a2b3c4d 20.00 --reference invoice-0042"),
}


def prices(as_json: JsonFields = None) -> None:
    """The price list: on-demand, interruptible (exactly half), 100 GPU-hours, savings.

    Public: no key is sent, so that it works before `login` (with no config at all)."""
    with handled(), Client(server_url()) as api:
        found = api.prices()
    if as_json:
        print_json(found, as_json)
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


def median_between(stat: dict[str, Any]) -> str:
    """The median time between interruptions as a duration: how long an interrupted run of the
    type had run since its (re)start (the server's figure, `app.queries`); `-` when none of the
    type was interrupted in the window."""
    median = stat.get("median_time_between_interruptions_s")
    return fmt.NONE if median is None else fmt.duration(median)


def fleet(as_json: JsonFields = None) -> None:
    """Pools, free GPUs, queue depth, and how often each GPU type is interrupted."""
    with handled(), client() as api:
        found = api.fleet()
    if as_json:
        print_json(found, as_json)
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
        stats.add_row(s["gpu_type"], str(s["interruptions"]), median_between(s))
    console = Console()
    console.print(pools)
    console.print(stats)


def period(month: str | None, start: str | None, end: str | None) -> tuple[int, int | None]:
    """The bill's [start, end): `--month`, or `--start`/`--end` (ISO or epoch seconds; by
    default every usage until now)."""
    if month is not None:
        if start is not None or end is not None:
            raise InvalidRequest(
                "--month takes no --start or --end", hint="give one month or a start and end"
            )
        return fmt.parse_month(month)
    first = 0 if start is None else fmt.parse_time(start, flag="--start")
    return first, None if end is None else fmt.parse_time(end, flag="--end")


def bill_lines(found: dict[str, Any], show_exact: bool) -> tuple[Table, str]:
    """The invoice table (cents per line, `--exact` adds the exact column) and its total line."""
    columns = ["line", "amount", *(["exact"] if show_exact else []), "saved vs on-demand"]
    table = Table(*columns)
    for line in found["lines"]:
        saved = fmt.cents(line["savings"]) if line["kind"] == "gpu" else fmt.NONE
        exact = [fmt.exact(line["amount_exact"])] if show_exact else []
        table.add_row(line["description"], fmt.cents(line["amount"]), *exact, saved)
    total = f"total {fmt.cents(found['total'])}"
    if show_exact:
        total += f" (exact {fmt.exact(found['total_exact'])})"
    credits = found.get("credits") or []
    if credits:
        total += (
            f" · credits -{fmt.cents(found['credits_total'])}"
            f" · after credits {fmt.cents(found['total_after_credits'])}"
        )
    return table, (
        f"{total} · saved {fmt.cents(found['savings'])} · balance {fmt.cents(found['balance'])}"
    )


def credit_lines(found: dict[str, Any], show_exact: bool) -> list[str]:
    """The lost-work credits of the period, each its own line with its reason (local time)."""
    lines = []
    for c in found.get("credits") or []:
        amount = f"-{fmt.cents(c['amount'])}"
        if show_exact:
            amount += f" (exact -{fmt.exact(c['amount_exact'])})"
        lines.append(f"  {fmt.local_time(c['at'])}  {amount}  {c['description']}")
    return lines


def period_line(start_s: int, end_s: int) -> str:
    if start_s == 0:
        return f"every usage until {fmt.local_time(end_s)}"
    return f"{fmt.local_time(start_s)} → {fmt.local_time(end_s)}"


def bill(
    month: Annotated[str | None, typer.Option(help="a calendar month, e.g. 2026-11")] = None,
    start: Annotated[
        str | None, typer.Option(help="period start: 2026-11-01, 2026-11-01T18:00 or epoch s")
    ] = None,
    end: Annotated[str | None, typer.Option(help="period end (default: now)")] = None,
    show_exact: ExactFlag = False,
    as_json: JsonFields = None,
) -> None:
    """Invoice lines (GPU, storage) to the cent, rounded at the line, lost-work credits (each
    with its reason), savings, balance. Times are local; the default period is every usage until
    now."""
    with handled(), client() as api:
        first, last = period(month, start, end)
        found = api.bill(first, last)
    if as_json:
        print_json(found, as_json)
        return
    table, total = bill_lines(found, show_exact)
    typer.echo(period_line(found["period_start"], found["period_end"]))
    if found["lines"]:
        Console().print(table)
    else:
        typer.echo("no usage in this period")
    for line in credit_lines(found, show_exact):
        typer.echo(line)
    typer.echo(total)


def balance_lines(found: dict[str, Any], show_exact: bool) -> list[str]:
    """The balance to the cent (`--exact`: every digit) and the ledger with local times."""
    money = fmt.exact if show_exact else fmt.cents
    lines = [
        f"balance {money(found['balance'])} "
        f"(BalanceLow below {fmt.cents(found['low_balance_threshold'])})"
    ]
    if not found["can_launch"]:
        lines.append("new launches are refused until the account is topped up")
    amounts = [money(e["amount"]) for e in found["ledger"]]
    wide = max((len(a) for a in amounts), default=0)
    for e, amount in zip(found["ledger"], amounts, strict=True):
        lines.append(f"  {fmt.local_time(e['at'])}  {e['kind']:<6}  {amount:>{wide}}  {e['memo']}")
    return lines


def balance(show_exact: ExactFlag = False, as_json: JsonFields = None) -> None:
    """Your prepaid balance and its latest movements."""
    with handled(), client() as api:
        found = api.balance()
    if as_json:
        print_json(found, as_json)
        return
    for line in balance_lines(found, show_exact):
        typer.echo(line)


def topup(
    account_id: Annotated[str, typer.Argument(help="the account to credit")],
    amount: Annotated[str, typer.Argument(help='USD, exact, e.g. "20.00"')],
    reference: Annotated[
        str | None, typer.Option(help="a payment reference: the same one credits once")
    ] = None,
    admin_key: Annotated[str | None, typer.Option(help="default: LOWCOSTGPU_ADMIN_KEY")] = None,
    as_json: JsonFields = None,
) -> None:
    """Credit an account's prepaid balance (an operator's action: needs the admin key)."""
    with handled(), admin_client(admin_key) as api:
        account = api.topup(account_id, amount, reference)
    if as_json:
        print_json(account, as_json)
        return
    typer.echo(f"{account['id']} balance {fmt.cents(account['balance'])}")


def register(app: typer.Typer) -> None:
    for command in (prices, fleet, bill, balance, topup):
        app.command(cls=JsonCommand, epilog=EXAMPLES[command.__name__])(command)
