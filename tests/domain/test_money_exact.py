"""Money is exact: no float gets in, 0.481 × 0.5 is 0.2405, cents are rounded half-even once."""

from __future__ import annotations

from decimal import Decimal

import pytest

from lowcostgpu.domain.errors import InvalidRequest
from lowcostgpu.domain.money import Money, interruptible_rate, parse_decimal


@pytest.mark.parametrize("value", [0.481, 1.0, 0.0, float("nan")])
def test_floats_are_refused_with_a_hint_to_write_a_string(value: float) -> None:
    with pytest.raises(InvalidRequest, match="not as a float"):
        Money.of(value)  # type: ignore[arg-type]


@pytest.mark.parametrize("text", ["abc", "", "1,5", "0.4.8"])
def test_text_that_is_not_a_number_is_refused_naming_it(text: str) -> None:
    with pytest.raises(InvalidRequest, match="not a number"):
        parse_decimal(text, what="price")


@pytest.mark.parametrize("text", ["NaN", "Infinity", "-inf"])
def test_non_finite_amounts_are_refused(text: str) -> None:
    with pytest.raises(InvalidRequest, match="finite"):
        Money.of(text)


def test_multiplying_by_a_float_is_a_type_error_not_a_silent_rounding() -> None:
    with pytest.raises(TypeError):
        Money.of("0.481").times(0.5)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("on_demand", "interruptible"),
    [
        ("0.481", "0.2405"),
        ("1.680", "0.8400"),
        ("0.468", "0.2340"),
        ("0.448", "0.2240"),
        ("0.354", "0.1770"),
        ("0.148", "0.0740"),
        ("0.001", "0.0005"),
    ],
)
def test_interruptible_rate_is_half_exactly(on_demand: str, interruptible: str) -> None:
    rate = interruptible_rate(Money.of(on_demand))
    assert rate.amount == Decimal(interruptible)
    assert rate.times(2) == Money.of(on_demand)


def test_rtx_5090_half_price_is_shown_with_all_its_digits() -> None:
    assert str(interruptible_rate(Money.of("0.481"))) == "$0.2405"


@pytest.mark.parametrize(
    ("exact", "cents"),
    [
        ("0.125", "0.12"),  # half: to the even cent
        ("0.135", "0.14"),
        ("0.145", "0.14"),
        ("0.1251", "0.13"),  # just above half: up
        ("0.1249", "0.12"),  # just below half: down
        ("0.2405", "0.24"),
        ("0.005", "0.00"),
        ("0.015", "0.02"),
        ("-0.125", "-0.12"),
        ("2.675", "2.68"),  # the classic float trap: exact here
        ("10", "10.00"),
    ],
)
def test_to_cents_rounds_half_even(exact: str, cents: str) -> None:
    assert Money.of(exact).to_cents().amount == Decimal(cents)
    assert Money.of(exact).to_cents().amount.as_tuple().exponent == -2


def test_rounding_happens_on_the_total_not_on_the_rate() -> None:
    """12 minutes at 0.2405/h bills 0.0481, not 12 minutes at a rate rounded to 0.24."""
    rate = interruptible_rate(Money.of("0.481"))
    cost = rate.times(12 * 60).per(3600)
    assert cost.amount == Decimal("0.0481")
    assert Money.of("0.24").times(12 * 60).per(3600).amount != cost.amount


def test_arithmetic_and_ordering() -> None:
    a, b = Money.of("1.10"), Money.of("2.20")
    assert (a + b).amount == Decimal("3.30")
    assert (a - b).is_negative()
    assert a < b
    assert Money.zero() + a == a
    assert str(Money.zero()) == "$0"
    assert str(Money.of("3.50")) == "$3.5"
