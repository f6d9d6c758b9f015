"""A real server (store, loop, local runtime, uvicorn) on 127.0.0.1 for the API and CLI tests.

A module with its own name (not `conftest`), so tests import it without colliding with the
conftest modules of other test folders when the whole suite runs.
"""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from lowcostgpu.api.server import Running, start
from lowcostgpu.bootstrap.serve import ServeOptions
from lowcostgpu.client.api import Client
from lowcostgpu.domain.errors import LowcostgpuError

ADMIN_KEY = "lcg_admin_test-key-0123456789abcdef"
FLEET = """
[[region]]
name = "eu-west"
  [[region.hosts]]
  name = "gpu-box"
  gpu_type = "a100-sxm4"
  gpus = 2
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Api:
    running: Running
    url: str
    data_dir: Path

    def admin(self) -> Client:
        return Client(self.url, ADMIN_KEY)

    def account(self, name: str, credit: str | None = "10.00") -> tuple[str, Client]:
        """A new account (topped up with `credit`) and a client with its key."""
        with self.admin() as admin:
            created = admin.create_account(name)
            if credit:
                admin.topup(created["id"], credit)
        return created["id"], Client(self.url, created["api_key"])


def kill_workloads(running: Running) -> None:
    runtime = running.wired.plane.runtime
    for report in runtime.observe():
        with suppress(LowcostgpuError):
            runtime.kill(report.allocation_id)


def http_client(server: Api, name: str) -> httpx.Client:
    """A raw HTTP client for a new account `name` (topped up with 10.00)."""
    with server.admin() as admin:
        created = admin.create_account(name)
        admin.topup(created["id"], "10.00")
    key = created["api_key"]
    return httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"}, timeout=30)


def serving(tmp_path_factory: pytest.TempPathFactory, fleet: str = FLEET) -> Iterator[Api]:
    tmp = tmp_path_factory.mktemp("server")
    (tmp / "fleet.toml").write_text(fleet)
    options = ServeOptions(
        data_dir=tmp / "data",
        fleet=tmp / "fleet.toml",
        port=free_port(),
        admin_key=ADMIN_KEY,
    )
    running = start(options)
    yield Api(running, running.url, options.data_dir)
    kill_workloads(running)
    running.stop()
    subprocess.run(["sh", "-c", f"grep -F '{tmp}' /proc/mounts | cut -d' ' -f2 | xargs -r umount"])
