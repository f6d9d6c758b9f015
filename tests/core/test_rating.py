"""Rating: exact Decimal/Fraction prices, cents only at the invoice line, half-even."""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction
from importlib.resources import files

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lowcostgpu.core.metering import UsageRecord, UsageSpan, meter, usage_totals
from lowcostgpu.core.rating import (
    build_invoice,
    exact_amount,
    invoice_lines,
    invoice_of,
    rate,
    round_cents,
    to_money,
    unit_price,
)
from lowcostgpu.domain.capacity import CapacityClass
from lowcostgpu.domain.catalog import Catalog, parse_catalog
from lowcostgpu.domain.errors import NotFound
from lowcostgpu.domain.money import SECONDS_PER_MONTH, Money

CATALOG = parse_catalog((files("lowcostgpu.domain") / "catalog.toml").read_text())
BASE = 1_700_000_040
HOUR = 3600
IC = CapacityClass.INTERRUPTIBLE
OD = CapacityClass.ON_DEMAND


def record(
    quantity_s: int,
    *,
    gpu: str = "rtx-5090",
    cls: CapacityClass | None = IC,
    kind: str = "gpu",
    account: str = "acct-1",
    subject: str = "inst-1",
    start: int = BASE,
) -> UsageRecord:
    return UsageRecord(
        subject,
        account,
        kind,
        gpu,
        cls,
        start,
        start + 60,
        60,
        1,
        quantity_s,  # type: ignore[arg-type]
    )


def test_rtx_5090_interruptible_rate_is_exactly_0_2405() -> None:
    assert unit_price(record(1), CATALOG) == Money(Decimal("0.2405"))
    assert unit_price(record(1, cls=OD), CATALOG) == Money(Decimal("0.481"))


@pytest.mark.parametrize(("gpus", "hours"), [(1, 100), (4, 25), (8, 12.5)])
def test_100_gpu_hours_interruptible_on_rtx_5090_cost_24_05(gpus: int, hours: float) -> None:
    seconds = int(hours * HOUR)
    span = UsageSpan("inst-1", "acct-1", "gpu", "rtx-5090", gpus, IC, BASE, BASE + seconds)
    records = meter([span], {}, BASE + seconds + 120, 60)
    assert len(records) == seconds // 60  # metered per minute, rounded only at the line
    (line,) = invoice_lines(records, CATALOG, BASE, BASE + seconds + 120)
    assert line.amount_exact == Money(Decimal("24.05"))
    assert line.amount == Money(Decimal("24.05"))
    assert line.amount not in (Money(Decimal("24.00")), Money(Decimal("24.10")))
    assert line.rounding == Money(Decimal(0))
    assert line.savings == Money(Decimal("24.05"))  # on-demand would have been 48.10
    assert line.description == "rtx-5090 interruptible: 100 GPU-h × $0.2405/GPU-h"


@pytest.mark.parametrize(
    ("value", "cents"),
    [
        (Fraction("0.125"), "0.12"),
        (Fraction("0.135"), "0.14"),
        (Fraction("0.145"), "0.14"),
        (Fraction("0.155"), "0.16"),
        (Fraction("0.1250000001"), "0.13"),
        (Fraction("0.1349999999"), "0.13"),
        (Fraction(1, 3), "0.33"),
        (Fraction(2, 3), "0.67"),
    ],
)
def test_cents_are_rounded_half_even_from_the_exact_value(value: Fraction, cents: str) -> None:
    assert round_cents(value) == Money(Decimal(cents))


@pytest.mark.parametrize(("on_demand", "charged"), [("0.25", "0.12"), ("0.27", "0.14")])
def test_an_invoice_line_on_a_half_cent_rounds_half_even(on_demand: str, charged: str) -> None:
    text = f'[storage]\nper_gb_month = "0.10"\n[gpu.t]\non_demand_per_gpu_hour = "{on_demand}"\n'
    catalog = parse_catalog(text)
    records = [record(60, gpu="t", start=BASE + 60 * i) for i in range(60)]  # 1 GPU-hour
    (line,) = invoice_lines(records, catalog, BASE, BASE + HOUR)
    assert line.amount_exact == Money(Decimal(on_demand) / 2)
    assert line.amount == Money(Decimal(charged))


def test_storage_is_priced_per_gb_month() -> None:
    month = record(50 * SECONDS_PER_MONTH, kind="storage", gpu="ckpts", cls=None)
    assert rate(month, CATALOG) == Money(Decimal("5.00"))
    (line,) = invoice_lines([month], CATALOG, BASE, BASE + 1)
    assert line.savings == Money(Decimal(0))
    assert line.description.startswith("volume ckpts:")


def test_a_minute_record_is_rated_without_float_and_close_to_exact() -> None:
    amount = rate(record(60), CATALOG).amount
    assert isinstance(amount, Decimal)
    assert abs(Fraction(amount) - Fraction("0.2405") / 60) < Fraction(1, 10**20)
    assert to_money(Fraction("0.2405")) == Money(Decimal("0.2405"))


def test_unknown_gpu_type_is_a_clear_error() -> None:
    with pytest.raises(NotFound, match="unknown GPU type"):
        rate(record(60, gpu="tpu-v9"), CATALOG)


def test_invoice_keeps_accounts_apart_and_totals_its_rounded_lines() -> None:
    records = [
        record(HOUR, gpu="a100-sxm4"),
        record(HOUR, gpu="a100-sxm4", cls=OD, subject="inst-2"),
        record(HOUR, gpu="a100-sxm4", account="acct-2"),
        record(HOUR * 730, kind="storage", gpu="vol", cls=None),
        record(HOUR, gpu="a100-sxm4", start=BASE + 10**6),  # outside the period
    ]
    invoice = build_invoice("acct-1", records, CATALOG, BASE, BASE + 10**5)
    amounts = sorted(str(line.amount) for line in invoice.lines)
    assert amounts == ["$0.1", "$0.23", "$0.47"]
    assert invoice.total == Money(Decimal("0.80"))  # the sum of the lines as shown
    assert invoice.total_exact == Money(Decimal("0.802"))
    assert invoice.savings == Money(Decimal("0.23"))  # 0.234 saved, rounded at the line


# --- properties ---------------------------------------------------------------------------------

_gpu_types = sorted(CATALOG.gpu_types)


@st.composite
def _records(draw: st.DrawFn) -> list[UsageRecord]:
    out = []
    for i in range(draw(st.integers(1, 40))):
        storage = draw(st.booleans())
        out.append(
            record(
                draw(st.integers(1, 120)) * draw(st.integers(1, 500 if storage else 8)),
                kind="storage" if storage else "gpu",
                gpu=draw(st.sampled_from(["v1", "v2"] if storage else _gpu_types)),
                cls=None if storage else draw(st.sampled_from([IC, OD])),
                account=draw(st.sampled_from(["a", "b"])),
                subject=f"s{i}",
            )
        )
    return out


def _line_of(r: UsageRecord) -> tuple[str, str, str, str]:
    return (r.account_id, r.kind, r.resource, str(r.capacity_class))


@settings(max_examples=200, deadline=None)
@given(records=_records())
def test_lines_sum_their_records_exactly_and_round_by_at_most_half_a_cent(
    records: list[UsageRecord],
) -> None:
    catalog: Catalog = CATALOG
    lines = invoice_lines(records, catalog, BASE, BASE + 60)
    for line in lines:
        mine = [r for r in records if _line_of(r) == _line_of_line(line)]
        assert sum((exact_amount(r, catalog) for r in mine), Fraction(0)) == line.exact
        assert sum(r.quantity_s for r in mine) == line.quantity_s
        assert abs(Fraction(line.amount.amount) - line.exact) <= Fraction(1, 200)
        assert line.amount.amount == line.amount.amount.quantize(Decimal("0.01"))
        assert line.savings.amount >= 0
    assert sum(line.quantity_s for line in lines) == sum(r.quantity_s for r in records)


def _line_of_line(line: object) -> tuple[str, str, str, str]:
    return (
        line.account_id,  # type: ignore[attr-defined]
        line.kind,  # type: ignore[attr-defined]
        line.resource,  # type: ignore[attr-defined]
        str(line.capacity_class),  # type: ignore[attr-defined]
    )


@settings(max_examples=200, deadline=None)
@given(records=_records())
def test_an_invoice_from_the_stores_totals_is_the_invoice_of_the_records(
    records: list[UsageRecord],
) -> None:
    """What `GET /v1/billing` builds from `Store.usage_totals` (the records summed where they
    are) is, line for line and to the last digit, the invoice of the records themselves."""
    totals = usage_totals(records)
    for account in ("a", "b", "nobody"):
        assert invoice_of(account, totals, CATALOG, BASE, BASE + 60) == build_invoice(
            account, records, CATALOG, BASE, BASE + 60
        )
