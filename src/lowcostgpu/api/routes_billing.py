"""Prices (public); fleet, billing and balance (account keys); accounts, keys and top-ups
(admin key)."""

from __future__ import annotations

from dataclasses import asdict
from decimal import Decimal
from typing import Annotated, Any

from fastapi import APIRouter, Query

from lowcostgpu.api.context import AccountId, Admin, Ctx
from lowcostgpu.api.models_billing import (
    AccountIn,
    AccountOut,
    BalanceOut,
    BillOut,
    CreatedAccountOut,
    KeyOut,
    LedgerOut,
    PriceOut,
    PricesOut,
    TopupIn,
    UsageRecordOut,
    usd,
)
from lowcostgpu.api.models_input import MAX_INT64
from lowcostgpu.app import queries
from lowcostgpu.app.accounts import PREFIX_SHOWN
from lowcostgpu.core.rating import invoice_of
from lowcostgpu.domain.errors import InvalidRequest

router = APIRouter(prefix="/v1")


@router.get("/prices", tags=["prices", "public"])
def prices(ctx: Ctx) -> PricesOut:
    """Public, as on the product page: no key needed (an Authorization header is not read), so
    that `lowcostgpu prices` works before `login`. The catalog is the same for every account."""
    catalog = ctx.plane.catalog
    gpus = sorted(catalog.gpu_types.values(), key=lambda g: -g.on_demand_per_gpu_hour.amount)
    return PricesOut(
        gpus=[PriceOut.of(g) for g in gpus], storage_per_gb_month=usd(catalog.storage_per_gb_month)
    )


@router.get("/fleet", tags=["fleet"])
def fleet(ctx: Ctx, _: AccountId) -> dict[str, Any]:
    """Pools with free GPUs and queue depth (the live state); interruptions per GPU type over
    the last `queries.STATS_WINDOW_S` (the window's Preempted events). Aggregates only."""
    return {
        "pools": [asdict(p) for p in queries.pools(ctx.plane)],
        "interruptions": queries.interruption_statistics(ctx.plane),
    }


@router.get("/billing", tags=["billing"])
def bill(
    ctx: Ctx,
    account_id: AccountId,
    start: Annotated[int, Query(ge=0, le=MAX_INT64, description="period start, epoch s")] = 0,
    end: Annotated[
        int | None, Query(ge=0, le=MAX_INT64, description="period end (default: now)")
    ] = None,
) -> BillOut:
    """Invoice lines (GPU and storage) of the usage metered in [start, end), exact and rounded,
    and the lost-work credits of the period (dated at their drained run's end), each its own line
    with its reason."""
    given_end = end
    end = ctx.plane.clock.now() + 1 if end is None else end
    if end < start:
        raise InvalidRequest(
            f"the period ends ({end}) before it starts ({start})",
            hint="give an end after the start (epoch seconds), or leave out end: now",
        )
    store = ctx.plane.store
    # No record starts after now (only closed intervals are metered): with no end given the
    # period's usage is all of it since `start`, and from 0 that is the store's kept totals.
    totals = store.usage_totals(account_id=account_id, since=start, until=given_end)
    invoice = invoice_of(account_id, totals, ctx.plane.catalog, start, end)
    credits = store.ledger(account_id, kind="credit", since=start, until=end)
    return BillOut.of(invoice, ctx.accounts.balance(account_id), credits)


@router.get("/billing/usage", tags=["billing"])
def usage(
    ctx: Ctx, account_id: AccountId, limit: Annotated[int, Query(ge=1, le=100_000)] = 10_000
) -> list[UsageRecordOut]:
    """The metered records, newest last (one per subject, kind and interval)."""
    records = ctx.plane.store.usage(account_id=account_id, last=limit)
    return [
        UsageRecordOut(
            subject_id=r.subject_id,
            kind=r.kind,
            resource=r.resource,
            capacity_class=None if r.capacity_class is None else str(r.capacity_class),
            interval_start=r.interval_start,
            interval_end=r.interval_end,
            quantity_s=r.quantity_s,
        )
        for r in records
    ]


@router.get("/billing/balance", tags=["billing"])
def balance(
    ctx: Ctx, account_id: AccountId, ledger: Annotated[int, Query(ge=0, le=10_000)] = 20
) -> BalanceOut:
    """The prepaid balance and its last `ledger` movements (usage charges, top-ups, lost-work
    credits)."""
    amount = ctx.accounts.balance(account_id)
    entries = ctx.plane.store.ledger(account_id, last=ledger) if ledger else []
    return BalanceOut(
        account_id=account_id,
        balance=usd(amount),
        low_balance_threshold=usd(ctx.plane.config.low_balance_usd),
        can_launch=amount > 0,
        ledger=[
            LedgerOut(at=e.at, kind=e.kind, amount=usd(e.amount), memo=e.memo) for e in entries
        ],
    )


@router.get("/account", tags=["accounts"])
def me(ctx: Ctx, account_id: AccountId) -> AccountOut:
    a = ctx.plane.store.account(account_id)
    return AccountOut(
        id=a.id, name=a.name, created_at=a.created_at, balance=usd(ctx.accounts.balance(a.id))
    )


# Admin -----------------------------------------------------------------------------------------


@router.post("/accounts", status_code=201, tags=["admin"])
def create_account(ctx: Ctx, _: Admin, body: AccountIn) -> CreatedAccountOut:
    """A new account and its first API key (shown once)."""
    account, key = ctx.accounts.create_account(body.name)
    return CreatedAccountOut(
        id=account.id, name=account.name, created_at=account.created_at, balance="0.00", api_key=key
    )


@router.get("/accounts", tags=["admin"])
def list_accounts(ctx: Ctx, _: Admin) -> list[AccountOut]:
    balances = ctx.plane.store.balances()
    return [
        AccountOut(
            id=a.id,
            name=a.name,
            created_at=a.created_at,
            balance=usd(balances.get(a.id, Decimal(0))),
        )
        for a in ctx.plane.store.accounts()
    ]


@router.post("/accounts/{account_id}/keys", status_code=201, tags=["admin"])
def create_key(ctx: Ctx, _: Admin, account_id: str) -> KeyOut:
    key = ctx.accounts.create_key(account_id)
    return KeyOut(account_id=account_id, api_key=key, prefix=key[:PREFIX_SHOWN])


@router.post("/accounts/{account_id}/topup", tags=["admin"])
def topup(ctx: Ctx, _: Admin, account_id: str, body: TopupIn) -> AccountOut:
    """Credit an account's prepaid balance (money received outside lowcostgpu)."""
    ctx.accounts.topup(account_id, body.amount, body.reference)
    return me(ctx, account_id)
