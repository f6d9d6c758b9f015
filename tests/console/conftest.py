"""Fixtures of the console tests: one real server per module, a Chromium page per test."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from console_server import Server, chromium_or_skip, launch_browser, serving


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    yield from serving(tmp_path_factory.mktemp("console"))


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    chromium_or_skip()
    try:
        from playwright import sync_api
    except ImportError as exc:
        if os.environ.get("CI"):
            pytest.fail(f"playwright is required in CI (the dev extras): {exc}")
        pytest.skip(f"no playwright: {exc}")
    with sync_api.sync_playwright() as playwright:
        chromium = launch_browser(playwright)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(60_000)  # Playwright's 30 s is short for Chromium on a loaded machine
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    yield page
    context.close()
    assert not errors, f"JavaScript errors in the console: {errors}"
