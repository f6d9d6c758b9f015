"""The CLI's views of API answers, as pure functions: `ls` within 80 and 200 columns, `show` as
key–value lines, the bill and the balance to the cent, `fleet`'s median, `--json FIELDS`."""

from __future__ import annotations

from typing import Any

import pytest

from lowcostgpu.cli import billing, instances
from lowcostgpu.cli.context import ALL_FIELDS, bare_json_filled, selected
from lowcostgpu.domain.errors import InvalidRequest

NOW = 1_764_614_580


def instance(n: int, **changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "id": f"i-c24f09{n:02x}",
        "status": "interrupting",
        "gpu": "a100-sxm4",
        "region": "eu-west",
        "gpus": 8,
        "type": "interruptible",
        "price_per_hour": "1.924",
        "restart_count": 12,
        "interruption_count": 12,
        "last_checkpoint_step": 123456,
        "host_id": "gpu-box",
        "gpu_indices": [0, 1, 2, 3, 4, 5, 6, 7],
        "queue_position": 12,
        "queue": {"position": 12, "gpus_ahead": 16, "eta_at": None, "eta_s": None},
        "notice_at": NOW - 30,
        "deadline": NOW + 270,
        "exit_code": None,
        "failure_reason": None,
        "volume": "ckpts",
        "created_at": NOW - n * 86400 - 4 * 3600,
    }
    return {**base, **changes}


FOUND: list[Any] = [instance(n) for n in (1, 2, 30)]


@pytest.mark.parametrize(
    ("columns", "shown", "dropped"),
    [
        (200, ["ID", "STATUS", "AGE", "GPU", "$/HR", "TYPE", "REGION", "RESTARTS", "QUEUE"], []),
        (80, ["ID", "STATUS", "AGE", "GPU", "$/HR"], ["REGION", "RESTARTS"]),
        (40, ["ID", "STATUS"], ["GPU", "$/HR"]),
    ],
)
def test_ls_fits_the_terminal_by_dropping_columns_never_cutting_ids(
    columns: int, shown: list[str], dropped: list[str]
) -> None:
    lines = instances.ls_lines(FOUND, NOW, columns)
    header = lines[0].split()
    assert all(title in header for title in shown)
    assert not any(title in header for title in dropped)
    assert all(len(line) <= columns for line in lines)
    assert [line.split()[0] for line in lines[1:]] == [i["id"] for i in FOUND]  # whole, in order
    assert "…" not in "".join(lines)


def test_ls_shows_age_gpu_price_and_state() -> None:
    row = instances.ls_lines(FOUND[:1], NOW, 200)[1]
    assert "1 d 4 h ago" in row and "a100-sxm4 ×8" in row and "$1.924" in row
    assert "interrupting" in row and "#12" in row


def test_show_is_aligned_key_value_lines_without_python_reprs() -> None:
    lines = instances.show_lines(instance(1), NOW)
    text = "\n".join(lines)
    assert "None" not in text and "{" not in text and "[" not in text
    keys = [line.split()[0] for line in lines]
    assert "queue.position" in keys and "queue.eta" in keys and "exit_code" in keys
    values_at = {line.index(line.split()[1], len(line.split()[0])) for line in lines}
    assert len(values_at) == 1  # one column of values
    by_key = {line.split()[0]: line.split(None, 1)[1] for line in lines}
    assert by_key["exit_code"] == "-" and by_key["queue.eta"] == "-"
    assert by_key["price_per_hour"] == "$1.924/hr"
    assert by_key["gpu_indices"] == "0, 1, 2, 3, 4, 5, 6, 7"
    assert by_key["deadline"].endswith("(in 4 min)") and by_key["created_at"].endswith("ago)")


BILL = {
    "lines": [
        {
            "kind": "gpu",
            "description": "a100-sxm4 interruptible",
            "amount": "0.02",
            "amount_exact": "0.02366251141552511416",
            "savings": "0.0236",
        },
        {
            "kind": "storage",
            "description": "volume ckpts",
            "amount": "0.00",
            "amount_exact": "0.000011",
            "savings": "0",
        },
    ],
    "total": "0.02",
    "total_exact": "0.02367351141552511416",
    "savings": "0.0236",
    "balance": "19.97633748858447488584",
}


def _text(table: Any) -> str:
    from rich.console import Console

    console = Console(width=200, record=True)
    console.print(table)
    return console.export_text()


def test_the_bill_is_to_the_cent_and_exact_only_on_request() -> None:
    table, total = billing.bill_lines(BILL, show_exact=False)
    assert total == "total $0.02 · saved $0.02 · balance $19.98"
    assert "0.0236625" not in _text(table) and "$0.02" in _text(table)
    table, total = billing.bill_lines(BILL, show_exact=True)
    assert "(exact $0.02367351141552511416)" in total
    assert "$0.02366251141552511416" in _text(table) and "exact" in _text(table)


def test_the_balance_is_to_the_cent_with_its_ledger_at_local_times() -> None:
    found = {
        "balance": "19.97633748858447488584",
        "low_balance_threshold": "1.00",
        "can_launch": True,
        "ledger": [{"at": NOW, "kind": "usage", "amount": "-0.02366251141552511416", "memo": "x"}],
    }
    lines = billing.balance_lines(found, show_exact=False)
    assert lines[0] == "balance $19.98 (BalanceLow below $1.00)"
    assert "-$0.02" in lines[1] and str(NOW) not in lines[1] and "-" in lines[1][:12]
    assert "$19.97633748858447488584" in billing.balance_lines(found, show_exact=True)[0]


@pytest.mark.parametrize(
    ("stat", "shown"),
    [
        ({"interruptions": 0, "median_time_between_interruptions_s": None}, "-"),
        ({"interruptions": 1, "median_time_between_interruptions_s": 0}, "0 s"),
        ({"interruptions": 1, "median_time_between_interruptions_s": 61}, "1 min"),
        ({"interruptions": 9, "median_time_between_interruptions_s": 5400}, "1 h 30 min"),
    ],
)
def test_fleet_shows_the_median_between_interruptions_as_a_duration(
    stat: dict[str, Any], shown: str
) -> None:
    assert billing.median_between(stat) == shown


@pytest.mark.parametrize(
    ("args", "read"),
    [
        (["--json"], [f"--json={ALL_FIELDS}"]),
        (["--json", "id,status"], ["--json", "id,status"]),
        (["i-c24", "--json"], ["i-c24", f"--json={ALL_FIELDS}"]),
        (["--json", "--limit", "2"], [f"--json={ALL_FIELDS}", "--limit", "2"]),
        (["--json", "i-c24"], [f"--json={ALL_FIELDS}", "i-c24"]),  # an id is never fields
        (["--json", "--", "sleep", "--json"], [f"--json={ALL_FIELDS}", "--", "sleep", "--json"]),
        (["--json=id"], ["--json=id"]),
    ],
)
def test_a_bare_json_flag_means_every_field(args: list[str], read: list[str]) -> None:
    assert bare_json_filled(args) == read


def test_json_fields_keep_only_those_and_name_the_known_ones_otherwise() -> None:
    items = [{"id": "i-1", "status": "running", "gpu": "a"}, {"id": "i-2", "status": "queued"}]
    assert selected(items, "id,status") == [
        {"id": "i-1", "status": "running"},
        {"id": "i-2", "status": "queued"},
    ]
    assert selected(items[0], "gpu") == {"gpu": "a"}
    assert selected(items, ALL_FIELDS) == items
    assert selected([], "anything") == []
    with pytest.raises(InvalidRequest, match="unknown JSON field colour") as caught:
        selected(items, "id,colour")
    assert caught.value.hint == "known fields: gpu, id, status"


@pytest.mark.parametrize(
    ("month", "start", "end", "expected"),
    [
        (None, None, None, (0, None)),  # every usage until now
        (None, "1764614580", None, (1764614580, None)),
        (None, None, "1764614580", (0, 1764614580)),
    ],
)
def test_the_bill_period_from_the_flags(
    month: str | None, start: str | None, end: str | None, expected: tuple[int, int | None]
) -> None:
    assert billing.period(month, start, end) == expected


def test_a_month_with_a_start_or_an_end_is_refused() -> None:
    with pytest.raises(InvalidRequest, match="--month takes no --start or --end"):
        billing.period("2026-11", "2026-11-02", None)
