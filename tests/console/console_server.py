"""A real server for the console tests (store, loop, local runtime, uvicorn) and a browser.

The fleet has one A100 (the seed scenario: an on-demand launch reclaims the interruptible run)
and a separate H100 pool with room for clusters. Chromium is Debian's (`/usr/bin/chromium`):
missing, the tests skip on a laptop and fail in CI (env CI=true).
"""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Iterator
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from lowcostgpu.api.server import Running, start
from lowcostgpu.bootstrap.serve import ServeOptions
from lowcostgpu.client.api import Client
from lowcostgpu.domain.errors import LowcostgpuError

CHROMIUM = Path("/usr/bin/chromium")
ADMIN_KEY = "lcg_admin_console-test-0123456789abcdef"
FLEET = """
[[region]]
name = "eu-west"
  [[region.hosts]]
  name = "a100-box"
  gpu_type = "a100-sxm4"
  gpus = 1
  [[region.hosts]]
  name = "h100-box"
  gpu_type = "h100-sxm"
  gpus = 4
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    running: Running
    url: str

    def admin(self) -> Client:
        return Client(self.url, ADMIN_KEY)

    def account(self, name: str, credit: str = "10.00") -> tuple[str, str, Client]:
        """A new account topped up with `credit`: its id, its API key and a client."""
        with self.admin() as admin:
            created = admin.create_account(name)
            admin.topup(created["id"], credit)
        return created["id"], created["api_key"], Client(self.url, created["api_key"])


def serving(tmp: Path, fleet: str = FLEET) -> Iterator[Server]:
    (tmp / "fleet.toml").write_text(fleet)
    options = ServeOptions(
        data_dir=tmp / "data",
        fleet=tmp / "fleet.toml",
        port=free_port(),
        admin_key=ADMIN_KEY,
        allow_private_webhooks=True,  # the webhook test's receiver listens on 127.0.0.1
    )
    running = start(options)
    try:
        yield Server(running, running.url)
    finally:
        runtime = running.wired.plane.runtime
        for report in runtime.observe():
            with suppress(LowcostgpuError):
                runtime.kill(report.allocation_id)
        running.stop()
        subprocess.run(
            ["sh", "-c", f"grep -F '{tmp}' /proc/mounts | cut -d' ' -f2 | xargs -r umount"],
            check=False,
        )


def chromium_or_skip() -> None:
    if CHROMIUM.exists():
        return
    if os.environ.get("CI"):
        pytest.fail(f"{CHROMIUM} is required in CI (.ci/services/chromium.sh installs it)")
    pytest.skip(f"no {CHROMIUM}: apt-get install chromium")


def launch_browser(playwright: Any) -> Any:
    return playwright.chromium.launch(
        executable_path=str(CHROMIUM), args=["--no-sandbox", "--disable-dev-shm-usage"]
    )


def sign_in(page: Any, url: str, key: str, landing: str = "Instances") -> None:
    """Open the console and sign in with `key` (kept in the tab's sessionStorage)."""
    page.goto(f"{url}/console/")
    page.fill("input[name=key]", key)
    page.click("button[type=submit]")
    page.wait_for_selector(f"nav a.active:text('{landing}')")


def rendered(page: Any, selector: str) -> None:
    """Wait for `selector` on the page the router drew, not on its "Loading…" placeholder (a
    `.empty` too, shown from the route's change until the page is drawn)."""
    page.wait_for_function(
        "s => [...document.querySelectorAll(s)].some((e) => e.textContent !== 'Loading…')",
        arg=selector,
    )
