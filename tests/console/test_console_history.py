"""The console's plots over time and its tables, in a real browser: the Fleet page plots the
queue depth and the reclaims per hour of a real scenario (an instance queued, another reclaimed),
the Billing page plots the balance from the ledger, and a table of more than 50 rows pages and
sorts by a click or the keyboard on its column titles."""

from __future__ import annotations

import re
import time
from typing import Any

import httpx
from console_server import ADMIN_KEY, Server, sign_in

from waiting import wait_until

POOL = "eu-west/a100-sxm4"
SLEEP = ["sleep", "120"]


def _history(server: Server) -> dict[str, Any]:
    answer = httpx.get(
        f"{server.url}/v1/operator/history?window_s=3600&step_s=60",
        headers={"authorization": f"Bearer {ADMIN_KEY}"},
    )
    answer.raise_for_status()
    return dict(answer.json())


def _queue_and_reclaim(server: Server) -> None:
    """On the one A100: a run, a second one queued behind it, then an on-demand launch that
    reclaims the first (which is requeued)."""
    _, _, client = server.account("fleet-history")
    with client:
        first = client.launch(gpu="a100-sxm4", type="interruptible", command=SLEEP)
        client.launch(gpu="a100-sxm4", type="interruptible", command=SLEEP)
        wait_until(
            lambda: client.instance(first["id"])["status"] == "running", what="the first run"
        )
        client.launch(gpu="a100-sxm4", type="on-demand", command=["sleep", "3600"])
        wait_until(lambda: _history(server)["reclaims_window"] >= 1, what="a reclaim in history")


def test_the_fleet_page_plots_the_queue_depth_and_the_reclaims_of_a_real_scenario(
    server: Server, page: Any
) -> None:
    _queue_and_reclaim(server)
    sign_in(page, server.url, ADMIN_KEY, landing="Fleet")
    page.wait_for_selector("#queue-plot svg path")
    queue = page.locator("#queue-plot svg")
    assert queue.get_attribute("aria-label") == "queue depth over time"
    assert POOL in queue.locator("text.legend").all_text_contents()  # a line per pool
    note = page.inner_text("#queue-note")
    waiting = int(re.search(r"(\d+) waiting now", note).group(1))  # type: ignore[union-attr]
    peak = int(re.search(r"peak (\d+)", note).group(1))  # type: ignore[union-attr]
    assert waiting >= 1 and peak >= 1  # both runs wait behind the on-demand one
    bars = page.locator("#reclaims-plot svg rect title").all_text_contents()
    assert any(POOL in b for b in bars), bars  # the reclaim's bar, in its pool
    assert "1 reclaim(s)" in page.inner_text("#reclaims-note")
    page.click("a:text('last 6 h')")
    page.wait_for_function("() => location.hash.endsWith('window=6h')")
    page.wait_for_selector("a[aria-current=page]:text('last 6 h')")
    page.wait_for_selector("#reclaims-plot svg rect title", state="attached")
    assert "last 6 h" in page.inner_text("#reclaims-note")


def test_the_billing_page_plots_the_balance_from_the_ledger(server: Server, page: Any) -> None:
    account, key, _ = server.account("balance-plot", credit="10.00")
    time.sleep(1.1)  # a second later: a step of its own
    with server.admin() as admin:
        admin.topup(account, "5.00")
    sign_in(page, server.url, key)
    page.goto(f"{server.url}/console/#/billing")
    page.wait_for_selector("#balance-plot svg path", state="attached")
    plot = page.locator("#balance-plot svg")
    assert plot.get_attribute("aria-label") == "balance over time"
    ticks = plot.locator("text.tick").all_text_contents()
    assert "$0.00" in ticks and "$20.00" in ticks  # from nothing to above $15
    steps = plot.locator("path").first.get_attribute("d") or ""
    levels = {float(y) for y in re.findall(r"V([\d.]+)", steps)}
    assert len(levels) == 2  # $10, then $15: a step up at each top-up
    assert page.locator("#ledger tbody tr").count() == 2


def test_a_table_of_more_than_50_rows_pages_and_sorts_by_click_and_keyboard(
    server: Server, page: Any
) -> None:
    with server.admin() as admin:
        for i in range(60):
            admin.create_account(f"acct-{i}")
        total = len(admin.accounts())
    sign_in(page, server.url, ADMIN_KEY, landing="Fleet")
    page.click("nav a:text('Accounts')")
    page.wait_for_selector("#accounts")
    rows = page.locator("#accounts tbody tr")
    pager = page.locator(".pager")
    assert rows.count() == 50 and f"1–50 of {total}" in pager.inner_text()
    assert pager.locator("button[data-go=prev]").is_disabled()
    pager.locator("button[data-go=next]").click()
    assert rows.count() == total - 50 and f"51–{total} of {total}" in pager.inner_text()
    assert pager.locator("button[data-go=next]").is_disabled()

    name = page.locator("#accounts th button:has-text('Name')")
    name.click()  # ascending, back to the first page; names compare as numbers do
    assert page.locator("#accounts th:nth-child(2)").get_attribute("aria-sort") == "ascending"
    names = page.locator("#accounts tbody td:nth-child(2)").all_inner_texts()
    assert names[:12] == [f"acct-{i}" for i in range(12)] and "1–50" in pager.inner_text()
    name.click()  # descending
    assert page.locator("#accounts th:nth-child(2)").get_attribute("aria-sort") == "descending"
    names = page.locator("#accounts tbody td:nth-child(2)").all_inner_texts()
    assert names == sorted(names, key=_natural, reverse=True)

    page.locator("#accounts th button:has-text('Account')").focus()
    page.keyboard.press("Enter")  # the titles are buttons: the keyboard sorts too
    ids = page.locator("#accounts tbody td:nth-child(1)").all_inner_texts()
    assert ids == sorted(ids, key=_natural) and page.evaluate(
        "document.activeElement.textContent"
    ).startswith("Account")  # the focus stays on the title that was used
    pager.locator("button[data-go=next]").focus()
    page.keyboard.press("Enter")
    assert rows.count() == total - 50
    assert page.evaluate("document.activeElement.dataset.go") in ("prev", "next")


def _natural(text: str) -> list[Any]:
    """The console's order: runs of digits compare as numbers (acct-2 before acct-10)."""
    return [int(part) if part.isdigit() else part.lower() for part in re.split(r"(\d+)", text)]
