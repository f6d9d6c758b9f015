"""How the CLI shows values to people, and reads the times they type: the one reader of each view.

The API answers machines (exact decimal text, epoch seconds); people read cents, local times and
durations. Money is rounded to the cent as the bill rounds its lines (half-even,
`domain.money.Money.to_cents`), so a shown amount is the billed one; the exact amount is shown
only on request (`--exact`) and always in `--json`. Times are local (`2026-12-01 18:43`) or
relative (`3 min ago`). Everything here is a pure function of its arguments: callers pass the
clock's `now_s` and the terminal's width.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from lowcostgpu.domain.errors import InvalidRequest
from lowcostgpu.domain.money import Money

NONE = "-"  # what a missing value reads as, in every view
UNIT_S = {"s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
SINCE = re.compile(r"(\d+)\s*(s|m|min|h|d|w)")
MONTH = re.compile(r"(\d{4})-(\d{2})")
SINCE_HINT = "e.g. --since 30m, 1h, 2d, 2026-12-01 or 2026-12-01T18:00 (local time)"

# Money ------------------------------------------------------------------------------------------


def _decimal(amount: str | Decimal) -> Decimal:
    try:
        return Decimal(amount)
    except InvalidOperation:
        raise InvalidRequest(f"the server sent {amount!r} as an amount") from None


def cents(amount: str | Decimal) -> str:
    """`$19.98` for 19.97633…: to the cent, half-even as the bill's lines; `-$0.50` below 0."""
    rounded = Money(_decimal(amount)).to_cents().amount
    sign = "-" if rounded < 0 else ""
    return f"{sign}${abs(rounded):.2f}"


def exact(amount: str | Decimal) -> str:
    """Every digit the server keeps: `$0.02366251141552511416`."""
    value = _decimal(amount)
    sign = "-" if value < 0 else ""
    return f"{sign}${abs(value)}"


def rate(amount: str | Decimal) -> str:
    """A price per hour keeps its digits (`$0.2405/hr`): it is a price, not a billed amount."""
    return f"{exact(amount)}/hr"


# Times ------------------------------------------------------------------------------------------


def local_time(at_s: int | None, *, seconds: bool = False) -> str:
    """`2026-12-01 18:43` in the local time zone (`-` for none)."""
    if at_s is None:
        return NONE
    shown = datetime.fromtimestamp(at_s).astimezone()
    return shown.strftime("%Y-%m-%d %H:%M:%S" if seconds else "%Y-%m-%d %H:%M")


def duration(seconds: float | None) -> str:
    """`45 s`, `12 min`, `2 h 5 min`, `3 d 4 h`: the two largest units that matter."""
    if seconds is None:
        return NONE
    s = round(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min"
    if s < 86400:
        h, m = divmod(s // 60, 60)
        return f"{h} h {m} min" if m else f"{h} h"
    d, h = divmod(s // 3600, 24)
    return f"{d} d {h} h" if h else f"{d} d"


def ago(at_s: int | None, now_s: float) -> str:
    """`3 min ago`, `just now`, `in 2 h` (a deadline ahead)."""
    if at_s is None:
        return NONE
    delta = now_s - at_s
    if abs(delta) < 5:
        return "just now"
    return f"{duration(delta)} ago" if delta > 0 else f"in {duration(-delta)}"


def when(at_s: int | None, now_s: float) -> str:
    """`2026-12-01 18:43 (3 min ago)`: both, for a detail view."""
    if at_s is None:
        return NONE
    return f"{local_time(at_s)} ({ago(at_s, now_s)})"


def parse_time(text: str, *, flag: str) -> int:
    """Epoch seconds from `1764614580`, `2026-12-01`, `2026-12-01T18:43` or `2026-12-01 18:43`
    (local time unless an offset is given, `...+00:00`)."""
    value = text.strip()
    if value.isdigit():
        return int(value)
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise InvalidRequest(
            f"{flag} {text!r} is not a date or time",
            hint="e.g. 2026-11-01, 2026-11-01T18:00 (local time) or epoch seconds",
        ) from None
    return int(parsed.astimezone().timestamp())


def parse_since(text: str, now_s: float) -> int:
    """Epoch seconds of `--since`: an age (`30m`, `1h`, `2d`) before now, or a time."""
    age = SINCE.fullmatch(text.strip().lower())
    if age:
        return int(now_s) - int(age.group(1)) * UNIT_S[age.group(2)]
    try:
        return parse_time(text, flag="--since")
    except InvalidRequest:
        raise InvalidRequest(
            f"--since {text!r} is neither an age nor a time", hint=SINCE_HINT
        ) from None


def parse_month(text: str) -> tuple[int, int]:
    """`2026-11` → [start, end) of that calendar month in local time, in epoch seconds."""
    found = MONTH.fullmatch(text.strip())
    if not found or not 1 <= int(found.group(2)) <= 12:
        raise InvalidRequest(f"--month {text!r} is not a month", hint="e.g. --month 2026-11")
    year, month = int(found.group(1)), int(found.group(2))
    following = datetime(year + month // 12, month % 12 + 1, 1)  # naive: each its own offset
    return int(datetime(year, month, 1).timestamp()), int(following.timestamp())


# Key–value views --------------------------------------------------------------------------------


def scalar(value: Any) -> str:
    """A value as one readable word: `-` for none and empty, `yes`/`no`, lists comma-joined."""
    if value is None or value == "" or value == [] or value == {}:
        return NONE
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list | tuple):
        return ", ".join(scalar(v) for v in value)
    return str(value)


def flatten(value: Mapping[str, Any], prefix: str = "") -> list[tuple[str, str]]:
    """Nested mappings as dotted keys (`queue.position`), each value one readable word."""
    pairs: list[tuple[str, str]] = []
    for key, item in value.items():
        name = f"{prefix}{key}"
        if isinstance(item, Mapping) and item:
            pairs += flatten(item, f"{name}.")
        else:
            pairs.append((name, scalar(item)))
    return pairs


def aligned(pairs: Iterable[tuple[str, str]]) -> list[str]:
    """`key   value` lines, the values in one column."""
    listed = list(pairs)
    width = max((len(k) for k, _ in listed), default=0)
    return [f"{k:<{width}}  {v}".rstrip() for k, v in listed]


# Tables that fit ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Column:
    """A column of a plain table; the smaller `rank`, the longer it is kept on a narrow screen
    (rank 0: never dropped, e.g. the id, which is never truncated either)."""

    title: str
    rank: int
    right: bool = False


GAP = 2  # spaces between columns


def fitted(columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int) -> list[str]:
    """The table's lines within `width` columns, by dropping the least important columns (the
    highest rank first) until it fits, never by cutting a value: ids stay whole to be copied.
    O(columns² × rows), a handful of columns."""
    keep = list(range(len(columns)))
    while True:
        widths = {i: max([len(columns[i].title), *(len(r[i]) for r in rows)]) for i in keep}
        total = sum(widths.values()) + GAP * (len(keep) - 1)
        droppable = [i for i in keep if columns[i].rank > 0]
        if total <= width or not droppable:
            break
        keep.remove(max(droppable, key=lambda i: (columns[i].rank, i)))

    def line(cells: Sequence[str]) -> str:
        parts = [
            cells[i].rjust(widths[i]) if columns[i].right else cells[i].ljust(widths[i])
            for i in keep
        ]
        return (" " * GAP).join(parts).rstrip()

    return [line([c.title for c in columns]), *(line(r) for r in rows)]
