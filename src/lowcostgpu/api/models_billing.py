"""Bodies of the prices, fleet, billing and account endpoints. Money is exact decimal text."""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from fractions import Fraction

from pydantic import BaseModel, ConfigDict, Field

from lowcostgpu.api.models_input import PLAIN_TEXT
from lowcostgpu.app.accounts import TOPUP_AMOUNT_PATTERN
from lowcostgpu.core.rating import Invoice, InvoiceLine, round_cents, to_money
from lowcostgpu.domain.catalog import GpuType
from lowcostgpu.domain.money import Money
from lowcostgpu.ports.store_records import LedgerEntry

REFERENCE_GPU_HOURS = 100  # the price table shows the cost of 100 GPU-hours, as the product page


def usd(value: Money | Decimal) -> str:
    """Exact decimal text, without exponent or trailing zeros beyond the cents."""
    amount = value.amount if isinstance(value, Money) else value
    text = f"{amount.normalize():f}"
    if "." not in text:
        return f"{text}.00"
    whole, frac = text.split(".")
    return f"{whole}.{frac.ljust(2, '0')}"


class PriceOut(BaseModel):
    gpu: str
    name: str
    memory_gb: int
    on_demand_per_gpu_hour: str
    interruptible_per_gpu_hour: str
    interruptible_100_gpu_hours: str
    savings_100_gpu_hours: str

    @classmethod
    def of(cls, gpu: GpuType) -> PriceOut:
        od, it = gpu.on_demand_per_gpu_hour, gpu.interruptible_per_gpu_hour
        return cls(
            gpu=gpu.name,
            name=gpu.display_name,
            memory_gb=gpu.memory_gb,
            on_demand_per_gpu_hour=usd(od),
            interruptible_per_gpu_hour=usd(it),
            interruptible_100_gpu_hours=usd(it.times(REFERENCE_GPU_HOURS)),
            savings_100_gpu_hours=usd((od - it).times(REFERENCE_GPU_HOURS)),
        )


class PricesOut(BaseModel):
    currency: str = "USD"
    interruptible_discount: str = "0.50"
    gpus: list[PriceOut]
    storage_per_gb_month: str


class InvoiceLineOut(BaseModel):
    kind: str
    resource: str
    capacity_class: str | None
    description: str
    quantity_s: int
    hours: str  # GPU-hours or GB-hours, exact
    unit_price: str
    amount_exact: str
    amount: str  # rounded to cents, half-even, at the line
    rounding: str
    savings: str

    @classmethod
    def of(cls, line: InvoiceLine) -> InvoiceLineOut:
        from fractions import Fraction

        return cls(
            kind=line.kind,
            resource=line.resource,
            capacity_class=None if line.capacity_class is None else str(line.capacity_class),
            description=line.description,
            quantity_s=line.quantity_s,
            hours=usd(to_money(Fraction(line.quantity_s, 3600))),
            unit_price=usd(line.unit_price),
            amount_exact=usd(line.amount_exact),
            amount=usd(line.amount),
            rounding=usd(line.rounding),
            savings=usd(line.savings),
        )


class CreditLineOut(BaseModel):
    """A lost-work credit on the bill: its own line, with its reason (docs/billing.md)."""

    at: int
    description: str
    amount: str  # rounded to cents, half-even, at the line (what is credited on the bill)
    amount_exact: str  # what the balance was credited

    @classmethod
    def of(cls, entry: LedgerEntry) -> CreditLineOut:
        exact = Fraction(entry.amount)
        return cls(
            at=entry.at,
            description=entry.memo,
            amount=usd(round_cents(exact)),
            amount_exact=usd(to_money(exact)),
        )


class BillOut(BaseModel):
    account_id: str
    period_start: int
    period_end: int
    lines: list[InvoiceLineOut]
    total: str
    total_exact: str
    savings: str
    gpu_seconds: int
    balance: str
    credits: list[CreditLineOut] = Field(default_factory=list)  # lost-work credits of the period
    credits_total: str = "0.00"  # the sum of the rounded credit lines
    credits_total_exact: str = "0.00"
    total_after_credits: str = "0.00"  # total − credits_total

    @classmethod
    def of(cls, invoice: Invoice, balance: Decimal, credits: Sequence[LedgerEntry] = ()) -> BillOut:
        credited = sum((round_cents(Fraction(e.amount)).amount for e in credits), Decimal(0))
        exact = sum((Fraction(e.amount) for e in credits), Fraction(0))
        return cls(
            credits=[CreditLineOut.of(e) for e in credits],
            credits_total=usd(credited),
            credits_total_exact=usd(to_money(exact)),
            total_after_credits=usd(invoice.total.amount - credited),
            account_id=invoice.account_id,
            period_start=invoice.period_start,
            period_end=invoice.period_end,
            lines=[InvoiceLineOut.of(line) for line in invoice.lines],
            total=usd(invoice.total),
            total_exact=usd(invoice.total_exact),
            savings=usd(invoice.savings),
            gpu_seconds=sum(line.quantity_s for line in invoice.lines if line.kind == "gpu"),
            balance=usd(balance),
        )


class UsageRecordOut(BaseModel):
    subject_id: str
    kind: str
    resource: str
    capacity_class: str | None
    interval_start: int
    interval_end: int
    quantity_s: int


class LedgerOut(BaseModel):
    at: int
    kind: str
    amount: str
    memo: str


class BalanceOut(BaseModel):
    account_id: str
    balance: str
    low_balance_threshold: str
    can_launch: bool
    ledger: list[LedgerOut] = Field(default_factory=list)


class AccountIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    name: str = Field(min_length=1, max_length=200, pattern=PLAIN_TEXT)


class AccountOut(BaseModel):
    id: str
    name: str
    created_at: int
    balance: str


class CreatedAccountOut(AccountOut):
    api_key: str = Field(description="shown once: store it now")


class KeyOut(BaseModel):
    account_id: str
    api_key: str = Field(description="shown once: store it now")
    prefix: str


class TopupIn(BaseModel):
    """Strict: the amount is text (a JSON number is not exact); its grammar is checked by
    `Accounts.topup`, which says which rule was broken (the pattern here documents it)."""

    model_config = ConfigDict(extra="forbid", strict=True)
    amount: str = Field(
        description='USD as exact decimal text, at most cents, e.g. "20.00"',
        max_length=40,
        json_schema_extra={"pattern": TOPUP_AMOUNT_PATTERN},
    )
    reference: str | None = Field(
        None,
        max_length=200,
        pattern=PLAIN_TEXT,
        description="idempotency: a top-up with the same one credits once",
    )
