"""The console in a real browser: every page renders from the API for the customer and the
operator, and a key's visibility is the API's (a foreign object's URL shows "not found")."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest
from console_server import ADMIN_KEY, Server, rendered, sign_in

CUSTOMER_PAGES = [
    ("instances", "#instances, .empty"),
    ("clusters", "#create-cluster"),
    ("events", "#events, .empty"),
    ("webhooks", "form"),
    ("billing", "#prices"),
]


@pytest.mark.parametrize(
    ("path", "status", "kind"),
    [
        ("/console/", 200, "text/html"),
        ("/console/app.js", 200, "text/javascript"),
        ("/console/style.css", 200, "text/css"),
        ("/console/logo.svg", 200, "image/svg+xml"),
        ("/console/nothing.js", 404, "application/json"),
        ("/console/..%2Fweb.py", 404, "application/json"),
        ("/console/web.py", 404, "application/json"),
    ],
)
def test_the_server_serves_the_console_files_and_nothing_else(
    server: Server, path: str, status: int, kind: str
) -> None:
    answer = httpx.get(f"{server.url}{path}")
    assert (answer.status_code, answer.headers["content-type"].split(";")[0]) == (status, kind)


def test_the_console_may_load_nothing_from_elsewhere(server: Server) -> None:
    policy = httpx.get(f"{server.url}/console/").headers["content-security-policy"]
    assert "default-src 'self'" in policy and "frame-ancestors 'none'" in policy


def test_the_root_redirects_to_the_console(server: Server) -> None:
    answer = httpx.get(f"{server.url}/", follow_redirects=False)
    assert answer.status_code in (302, 307) and answer.headers["location"] == "/console/"


def test_an_invalid_key_is_refused_at_sign_in(server: Server, page: Any) -> None:
    page.goto(f"{server.url}/console/")
    page.fill("input[name=key]", "lcg_not-a-key")
    page.click("button[type=submit]")
    page.wait_for_selector("text=This API key is not valid.")


def test_every_customer_page_renders(server: Server, page: Any) -> None:
    _, key, client = server.account("pages")
    with client:
        client.launch(gpu="h100-sxm", type="interruptible", command=["sleep", "30"])
    sign_in(page, server.url, key)
    for name, selector in CUSTOMER_PAGES:
        page.goto(f"{server.url}/console/#/{name}")
        page.wait_for_selector(f"nav a.active[href='#/{name}']")  # the route has changed
        rendered(page, selector)
        assert page.locator(".problem").count() == 0, (name, page.inner_text("main"))


def test_the_operator_sees_the_fleet_and_the_accounts(server: Server, page: Any) -> None:
    server.account("someone")
    sign_in(page, server.url, ADMIN_KEY, landing="Fleet")
    page.wait_for_selector("#pools")
    assert "a100-sxm4" in page.inner_text("#pools") and "h100-sxm" in page.inner_text("#pools")
    page.wait_for_selector("#interruptions")
    page.wait_for_selector("h2:text('Latest reclaims')")  # the policy's reasoning, for operators
    page.click("nav a:text('Accounts')")
    page.wait_for_selector("#accounts")
    assert "someone" in page.inner_text("#accounts")


def test_a_foreign_instance_url_shows_not_found_and_none_of_its_data(
    server: Server, page: Any
) -> None:
    _, _, victim = server.account("victim")
    _, key, _ = server.account("intruder")
    with victim:
        theirs = victim.launch(
            gpu="h100-sxm", type="interruptible", command=["sleep", "30"], volume="secret-vol:1GB"
        )
    time.sleep(0.3)
    sign_in(page, server.url, key)
    page.goto(f"{server.url}/console/#/instances/{theirs['id']}")
    page.wait_for_selector("h1:text('Instance not found')")
    text = page.inner_text("main")
    assert "not found" in text
    assert "secret-vol" not in text and "h100" not in text and "$" not in text
    page.goto(f"{server.url}/console/#/instances")
    page.wait_for_selector("h1:text('Instance not found')", state="detached")  # route changed
    rendered(page, "#instances, .empty")
    assert theirs["id"] not in page.inner_text("main")


def test_the_events_page_filters_by_reason_and_shows_new_events_live(
    server: Server, page: Any
) -> None:
    _, key, client = server.account("events")
    sign_in(page, server.url, key)
    page.goto(f"{server.url}/console/#/events?reason=Queued")
    page.wait_for_selector(".card .empty")
    page.evaluate("window.__notReloaded = true")
    with client:
        inst = client.launch(gpu="h100-sxm", type="interruptible", command=["sleep", "30"])
    page.locator("#events td.mono", has_text=inst["id"]).wait_for()  # (the message names it too)
    reasons = page.locator("#events td.reason").all_inner_texts()
    assert reasons == ["Queued"]  # Scheduled and Started are filtered out
    assert page.evaluate("window.__notReloaded") is True


def test_a_launch_from_the_form_appears_in_the_list_and_a_refusal_shows_why(
    server: Server, page: Any
) -> None:
    _, key, client = server.account("launcher")
    sign_in(page, server.url, key)
    page.wait_for_selector("#launch")
    page.select_option("#launch select[name=gpu]", "h100-sxm")
    page.fill("#launch input[name=command]", "sleep 30")
    page.click("#launch button[type=submit]")
    page.locator("#launch-result .notice").wait_for()
    (made,) = client.instances()
    assert made["gpu"] == "h100-sxm" and made["type"] == "interruptible"
    page.locator("#instances td", has_text=made["id"]).wait_for()  # the list follows events
    page.fill("#launch input[name=gpus]", "64")
    page.select_option("#launch select[name=type]", "on-demand")
    page.click("#launch button[type=submit]")
    page.locator("#launch-result .problem").wait_for()  # no host has 64 GPUs: the API says so
    assert len(client.instances()) == 1
    client.close()
