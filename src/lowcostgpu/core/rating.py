"""Rating: usage records priced from the catalog, and invoice lines rounded only at the line.

A record's true price is a rational number: 60 s at 0.2405 $/GPU-h is 0.2405 / 60 =
0.0040083333… $, which no finite decimal holds. So amounts are summed as `Fraction` (exact, never
float) and turned into `Decimal` only at the end: the line's exact amount (itself exact whenever it
terminates, e.g. 100 GPU-h at 0.2405 = 24.05 exactly) and the line's amount rounded to cents,
half-even, from the exact rational value. Both are shown, so the rounding is visible.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Decimal, localcontext
from fractions import Fraction
from typing import Final

from lowcostgpu.core.metering import (
    IntervalUsage,
    UsageKind,
    UsageRecord,
    UsageTotal,
    usage_total_order,
    usage_totals,
)
from lowcostgpu.domain.capacity import CapacityClass, Timestamp
from lowcostgpu.domain.catalog import Catalog
from lowcostgpu.domain.money import SECONDS_PER_HOUR, SECONDS_PER_MONTH, Money

Rated = UsageRecord | UsageTotal | IntervalUsage
"""What has a price: a record, or records summed (an account's line, the fleet's interval)."""

DISPLAY_PLACES: Final = 20
"""Decimal places kept when an exact amount does not terminate (an error below 1e-20 $)."""


def unit_price(record: Rated, catalog: Catalog) -> Money:
    """Per GPU-hour (on-demand, or interruptible = on-demand × 0.50) or per GB-month."""
    if record.kind == "storage":
        return catalog.storage_per_gb_month
    return gpu_price(catalog, record.resource, record.capacity_class)


def gpu_price(catalog: Catalog, gpu_type: str, capacity_class: CapacityClass | None) -> Money:
    """Per GPU-hour of `gpu_type` in `capacity_class` (a lost-work credit is priced so too)."""
    gpu = catalog.gpu(gpu_type)
    if capacity_class is CapacityClass.INTERRUPTIBLE:
        return gpu.interruptible_per_gpu_hour
    return gpu.on_demand_per_gpu_hour


def _per_second(kind: UsageKind) -> int:
    return SECONDS_PER_MONTH if kind == "storage" else SECONDS_PER_HOUR


def exact_amount(record: Rated, catalog: Catalog) -> Fraction:
    """GPU-seconds × $/GPU-h ÷ 3600, or GB-seconds × $/GB-month ÷ seconds per month; exact."""
    price = Fraction(unit_price(record, catalog).amount)
    return record.quantity_s * price / _per_second(record.kind)


def rate(record: UsageRecord, catalog: Catalog) -> Money:
    """The record's amount as Money: exact when it terminates, else to `DISPLAY_PLACES`."""
    return to_money(exact_amount(record, catalog))


def to_money(value: Fraction) -> Money:
    """A rational amount as Decimal: exact if its decimal expansion ends, else 20 places."""
    with localcontext() as ctx:
        ctx.prec = 200
        decimal = Decimal(value.numerator) / Decimal(value.denominator)
        if Fraction(decimal) != value:
            decimal = decimal.quantize(Decimal(1).scaleb(-DISPLAY_PLACES), ROUND_HALF_EVEN)
        return Money(decimal)


def round_cents(value: Fraction) -> Money:
    """Cents, half-even, from the exact value (0.125 → 0.12, 0.135 → 0.14)."""
    cents = round(value * 100)  # round() on a Fraction is exact and rounds half to even
    return Money(Decimal(cents).scaleb(-2))


@dataclass(frozen=True, slots=True)
class InvoiceLine:
    """One billed thing over a period; `amount` is what is charged, `amount_exact` the truth."""

    account_id: str
    kind: UsageKind
    resource: str
    capacity_class: CapacityClass | None
    period_start: Timestamp
    period_end: Timestamp
    quantity_s: int  # GPU-seconds or GB-seconds
    unit_price: Money  # per GPU-hour or per GB-month
    exact: Fraction
    on_demand_exact: Fraction  # what the same usage costs on-demand (equal for non-GPU lines)

    @property
    def amount_exact(self) -> Money:
        return to_money(self.exact)

    @property
    def amount(self) -> Money:
        return round_cents(self.exact)

    @property
    def rounding(self) -> Money:
        """amount − amount_exact: at most half a cent either way."""
        return Money(self.amount.amount - self.amount_exact.amount)

    @property
    def savings(self) -> Money:
        """What interruptible capacity saved against on-demand, rounded at the line."""
        return round_cents(self.on_demand_exact - self.exact)

    @property
    def description(self) -> str:
        hours = to_money(Fraction(self.quantity_s, SECONDS_PER_HOUR)).amount
        shown = f"{hours.quantize(Decimal('0.0001'), ROUND_HALF_EVEN).normalize():f}"
        if self.kind == "storage":
            return f"volume {self.resource}: {shown} GB-h × {self.unit_price} per GB-month"
        return f"{self.resource} {self.capacity_class}: {shown} GPU-h × {self.unit_price}/GPU-h"


@dataclass(frozen=True, slots=True)
class Invoice:
    account_id: str
    period_start: Timestamp
    period_end: Timestamp
    lines: tuple[InvoiceLine, ...]

    @property
    def total(self) -> Money:
        """The sum of the rounded lines: what the customer reads is what adds up."""
        return sum((line.amount for line in self.lines), Money.zero())

    @property
    def total_exact(self) -> Money:
        return to_money(sum((line.exact for line in self.lines), Fraction(0)))

    @property
    def savings(self) -> Money:
        return sum((line.savings for line in self.lines), Money.zero())


def invoice_lines(
    records: Iterable[UsageRecord],
    catalog: Catalog,
    period_start: Timestamp,
    period_end: Timestamp,
) -> list[InvoiceLine]:
    """Group records of [period_start, period_end) by account, kind, resource and class."""
    within = (r for r in records if period_start <= r.interval_start < period_end)
    return lines_of(usage_totals(within), catalog, period_start, period_end)


def lines_of(
    totals: Iterable[UsageTotal], catalog: Catalog, period_start: Timestamp, period_end: Timestamp
) -> list[InvoiceLine]:
    """One line per total (`usage_totals` of the period's records, or the store's own sums)."""
    return [_line(t, catalog, period_start, period_end) for t in totals]


def build_invoice(
    account_id: str,
    records: Iterable[UsageRecord],
    catalog: Catalog,
    period_start: Timestamp,
    period_end: Timestamp,
) -> Invoice:
    mine = (r for r in records if r.account_id == account_id)
    lines = invoice_lines(mine, catalog, period_start, period_end)
    return Invoice(account_id, period_start, period_end, tuple(lines))


def invoice_of(
    account_id: str,
    totals: Iterable[UsageTotal],
    catalog: Catalog,
    period_start: Timestamp,
    period_end: Timestamp,
) -> Invoice:
    """The invoice from the period's totals (`Store.usage_totals`): equal to `build_invoice` of
    the records they sum, line for line, without reading the records."""
    mine = sorted((t for t in totals if t.account_id == account_id), key=usage_total_order)
    return Invoice(
        account_id,
        period_start,
        period_end,
        tuple(lines_of(mine, catalog, period_start, period_end)),
    )


def total_exact(totals: Iterable[UsageTotal], catalog: Catalog) -> Fraction:
    """What the totals cost in all, exact (the operator's all-time revenue)."""
    return sum((exact_amount(t, catalog) for t in totals), Fraction(0))


def _line(
    total: UsageTotal, catalog: Catalog, period_start: Timestamp, period_end: Timestamp
) -> InvoiceLine:
    exact = exact_amount(total, catalog)
    on_demand = exact
    if total.kind == "gpu" and total.capacity_class is CapacityClass.INTERRUPTIBLE:
        od_price = Fraction(catalog.gpu(total.resource).on_demand_per_gpu_hour.amount)
        on_demand = total.quantity_s * od_price / SECONDS_PER_HOUR
    return InvoiceLine(
        account_id=total.account_id,
        kind=total.kind,
        resource=total.resource,
        capacity_class=total.capacity_class,
        period_start=period_start,
        period_end=period_end,
        quantity_s=total.quantity_s,
        unit_price=unit_price(total, catalog),
        exact=exact,
        on_demand_exact=on_demand,
    )
