"""A multi-node instance in the console: the list and its page say GPUs per host × hosts, and
the page names the hosts it runs on."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from console_server import Server, serving, sign_in

GANG_FLEET = """
[[region]]
name = "eu-west"
  [[region.hosts]]
  name = "box-1"
  gpu_type = "a100-sxm4"
  gpus = 1
  [[region.hosts]]
  name = "box-2"
  gpu_type = "a100-sxm4"
  gpus = 1
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    yield from serving(tmp_path_factory.mktemp("console-gangs"), fleet=GANG_FLEET)


def test_a_two_host_instance_shows_its_hosts(server: Server, page: Any) -> None:
    _, key, client = server.account("gang-team")
    with client:
        gang = client.launch(gpu="a100-sxm4", gpus=1, nodes=2, command=["sleep", "600"])
    assert gang["nodes"] == 2 and sorted(gang["host_ids"]) == ["box-1", "box-2"]
    sign_in(page, server.url, key)
    page.goto(f"{server.url}/console/#/instances")
    page.locator("tr", has_text=gang["id"]).get_by_text("1× a100-sxm4 × 2 hosts").wait_for()
    page.goto(f"{server.url}/console/#/instances/{gang['id']}")
    page.get_by_text("on box-1, box-2").wait_for()
