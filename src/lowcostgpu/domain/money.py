"""Money on `Decimal`, exact end to end.

Rates are kept with all their digits (0.481 × 0.5 = 0.2405 stays 0.2405); rounding to cents happens
only when an invoice line is closed, half-even, and both the exact and the rounded amount are kept
so the rounding is visible.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation
from typing import Final

from lowcostgpu.domain.errors import InvalidRequest

CENT: Final = Decimal("0.01")
INTERRUPTIBLE_DISCOUNT: Final = Decimal("0.50")
SECONDS_PER_HOUR: Final = 3600
# Storage is priced per GB-month; a month is 730 hours (365 × 24 / 12), the usual cloud convention.
SECONDS_PER_MONTH: Final = 730 * SECONDS_PER_HOUR


def parse_decimal(text: str | int | Decimal, *, what: str) -> Decimal:
    """Parse a price or amount given as text; floats are refused because they are not exact."""
    if isinstance(text, float):
        raise InvalidRequest(
            f'{what} must be given exactly, as a string such as "0.481", not as a float {text!r}'
        )
    try:
        value = Decimal(str(text))
    except InvalidOperation:
        raise InvalidRequest(f"{what} is not a number: {text!r}") from None
    if not value.is_finite():
        raise InvalidRequest(f"{what} must be a finite number, got {text!r}")
    return value


@dataclass(frozen=True, order=True, slots=True)
class Money:
    """An amount in USD. Arithmetic stays exact; `to_cents` is the only rounding."""

    amount: Decimal

    @classmethod
    def of(cls, value: str | int | Decimal) -> Money:
        return cls(parse_decimal(value, what="amount"))

    @classmethod
    def zero(cls) -> Money:
        return cls(Decimal(0))

    def __add__(self, other: Money) -> Money:
        return Money(self.amount + other.amount)

    def __sub__(self, other: Money) -> Money:
        return Money(self.amount - other.amount)

    def times(self, factor: Decimal | int) -> Money:
        return Money(self.amount * factor)

    def per(self, divisor: Decimal | int) -> Money:
        return Money(self.amount / Decimal(divisor))

    def to_cents(self) -> Money:
        """Round to cents, half-even: used only when an invoice line is closed."""
        return Money(self.amount.quantize(CENT, rounding=ROUND_HALF_EVEN))

    def is_negative(self) -> bool:
        return self.amount < 0

    def __str__(self) -> str:
        return f"${self.amount.normalize():f}" if self.amount != 0 else "$0"


def interruptible_rate(on_demand_rate: Money) -> Money:
    """The interruptible price: on-demand × 0.50, exactly, for every GPU type and region."""
    return on_demand_rate.times(INTERRUPTIBLE_DISCOUNT)
