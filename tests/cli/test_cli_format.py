"""`cli.format`: money to the cent as the bill rounds, local and relative times, durations, and
the times people type (`--since 1h`, `--month 2026-11`, ISO dates)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime

import pytest

from lowcostgpu.cli import format as fmt
from lowcostgpu.domain.errors import InvalidRequest
from lowcostgpu.domain.money import Money


@pytest.fixture(autouse=True)
def in_a_time_zone_off_utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Local time is not UTC here, so a test that mixed them up would fail."""
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.mark.parametrize(
    ("amount", "shown"),
    [
        ("19.97633748858447488584", "$19.98"),
        ("0.02366251141552511416", "$0.02"),
        ("0.005", "$0.00"),  # half-even, as the bill's lines: 0.005 → 0.00
        ("0.015", "$0.02"),
        ("7.5", "$7.50"),
        ("0", "$0.00"),
        ("-0.5", "-$0.50"),
        ("1234.567", "$1234.57"),
    ],
)
def test_money_is_shown_to_the_cent_as_the_bill_rounds(amount: str, shown: str) -> None:
    assert fmt.cents(amount) == shown
    assert fmt.cents(amount)[-4:] == f"{abs(Money.of(amount).to_cents().amount):.2f}"[-4:]


@pytest.mark.parametrize(
    ("amount", "shown"),
    [("0.02366251141552511416", "$0.02366251141552511416"), ("-1.5", "-$1.5"), ("3", "$3")],
)
def test_the_exact_amount_keeps_every_digit(amount: str, shown: str) -> None:
    assert fmt.exact(amount) == shown


def test_a_price_per_hour_keeps_its_digits() -> None:
    assert fmt.rate("0.2405") == "$0.2405/hr"


def test_an_amount_that_is_not_a_number_is_a_clear_error() -> None:
    with pytest.raises(InvalidRequest, match="as an amount"):
        fmt.cents("lots")


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (None, "-"),
        (0, "0 s"),
        (45, "45 s"),
        (59.6, "1 min"),
        (60, "1 min"),
        (3599, "59 min"),
        (3600, "1 h"),
        (7500, "2 h 5 min"),
        (86400, "1 d"),
        (3 * 86400 + 4 * 3600 + 59, "3 d 4 h"),
    ],
)
def test_durations_in_their_two_largest_units(seconds: float | None, shown: str) -> None:
    assert fmt.duration(seconds) == shown


@pytest.mark.parametrize(
    ("delta_s", "shown"),
    [(0, "just now"), (4, "just now"), (180, "3 min ago"), (7200, "2 h ago"), (-600, "in 10 min")],
)
def test_relative_times(delta_s: int, shown: str) -> None:
    now = 1_764_614_580
    assert fmt.ago(now - delta_s, now) == shown
    assert fmt.ago(None, now) == "-"


def test_local_times_are_in_the_local_zone() -> None:
    at = 1_764_614_580  # 2025-12-01 18:43 UTC: 13:43 in New York
    assert fmt.local_time(at) == "2025-12-01 13:43"
    assert fmt.local_time(at, seconds=True) == "2025-12-01 13:43:00"
    assert fmt.when(at, at + 180) == "2025-12-01 13:43 (3 min ago)"
    assert fmt.local_time(None) == "-"


NOW = 1_764_614_580


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("30m", NOW - 1800),
        ("1h", NOW - 3600),
        ("2d", NOW - 2 * 86400),
        ("45s", NOW - 45),
        ("1w", NOW - 7 * 86400),
        ("10 min", NOW - 600),
        ("2H", NOW - 7200),
        ("2025-12-01", NOW - (13 * 60 + 43) * 60),  # local midnight (the zone is set by then)
        ("2025-12-01T13:00", NOW - 43 * 60),
        ("2025-12-01 18:00+00:00", NOW - 43 * 60),
        ("1764614000", 1764614000),
    ],
)
def test_since_is_an_age_or_a_time(text: str, expected: int) -> None:
    assert fmt.parse_since(text, NOW) == expected


@pytest.mark.parametrize("text", ["yesterday", "1y", "-1h", "2025-13-01", ""])
def test_a_since_that_is_neither_says_what_it_takes(text: str) -> None:
    with pytest.raises(InvalidRequest, match="neither an age nor a time") as caught:
        fmt.parse_since(text, NOW)
    assert caught.value.hint is not None and "30m" in caught.value.hint


@pytest.mark.parametrize(
    ("month", "first", "following"),
    [
        ("2026-11", datetime(2026, 11, 1), datetime(2026, 12, 1)),
        ("2026-12", datetime(2026, 12, 1), datetime(2027, 1, 1)),
        ("2024-02", datetime(2024, 2, 1), datetime(2024, 3, 1)),
    ],
)
def test_a_month_is_its_local_calendar_month(
    month: str, first: datetime, following: datetime
) -> None:
    start, end = fmt.parse_month(month)
    assert (start, end) == (
        int(first.astimezone().timestamp()),
        int(following.astimezone().timestamp()),
    )


@pytest.mark.parametrize("month", ["2026-13", "2026-00", "11-2026", "2026/11", "november"])
def test_a_month_that_is_not_one_is_refused(month: str) -> None:
    with pytest.raises(InvalidRequest, match="is not a month"):
        fmt.parse_month(month)


def test_a_date_flag_takes_iso_or_epoch_seconds_and_says_so_otherwise() -> None:
    assert fmt.parse_time("0", flag="--start") == 0
    assert fmt.parse_time("2025-12-01T13:43", flag="--start") == NOW
    with pytest.raises(InvalidRequest, match="--end 'soon' is not a date or time"):
        fmt.parse_time("soon", flag="--end")


def test_nested_values_are_flattened_readably() -> None:
    pairs = fmt.flatten(
        {
            "id": "i-1",
            "queue": {"position": 1, "eta_s": None},
            "gpu_indices": [0, 1],
            "volume": None,
            "empty": [],
            "auto": True,
            "nothing": {},
        }
    )
    assert pairs == [
        ("id", "i-1"),
        ("queue.position", "1"),
        ("queue.eta_s", "-"),
        ("gpu_indices", "0, 1"),
        ("volume", "-"),
        ("empty", "-"),
        ("auto", "yes"),
        ("nothing", "-"),
    ]
    assert fmt.aligned([("id", "i-1"), ("queue.position", "1")]) == [
        "id              i-1",
        "queue.position  1",
    ]


COLUMNS = [fmt.Column("ID", 0), fmt.Column("A", 1), fmt.Column("B", 2, right=True)]
ROWS = [["i-0123456789", "aaaa", "1"], ["i-1", "a", "22"]]


@pytest.mark.parametrize(
    ("width", "header"),
    [(200, "ID            A      B"), (20, "ID            A"), (12, "ID"), (5, "ID")],
)
def test_a_table_drops_columns_to_fit_never_an_ids_characters(width: int, header: str) -> None:
    lines = fmt.fitted(COLUMNS, ROWS, width)
    assert lines[0] == header
    assert lines[1].startswith("i-0123456789")
    assert all(len(line) <= max(width, len("i-0123456789")) for line in lines)


def test_a_right_aligned_column_lines_up_on_the_right() -> None:
    lines = fmt.fitted(COLUMNS, ROWS, 200)
    assert [line[-2:] for line in lines] == [" B", " 1", "22"]
