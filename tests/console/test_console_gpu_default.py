"""The launch and cluster forms start on a GPU type the fleet has (first of the price list with
free GPUs, else with any), not on the catalog's first type, which a fleet may lack."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from console_server import Server, serving, sign_in

from waiting import wait_until

# No h100-sxm (the price list's first): a form that took the first price would fail a launch.
FLEET = """
[[region]]
name = "eu-west"
  [[region.hosts]]
  name = "a100-box"
  gpu_type = "a100-sxm4"
  gpus = 1
  [[region.hosts]]
  name = "l40s-box"
  gpu_type = "l40s"
  gpus = 1
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    yield from serving(tmp_path_factory.mktemp("console-gpu"), FLEET)


def _defaults(page: Any, server: Server) -> tuple[str, str]:
    page.goto(f"{server.url}/console/#/instances")
    launch = page.locator("#launch select[name=gpu]")
    launch.wait_for()
    chosen = launch.input_value()
    page.goto(f"{server.url}/console/#/clusters")
    cluster = page.locator("#create-cluster select[name=gpu]")
    cluster.wait_for()
    return chosen, cluster.input_value()


def test_the_forms_default_to_the_first_priced_gpu_type_with_free_gpus(
    server: Server, page: Any
) -> None:
    _, key, user = server.account("defaults")
    sign_in(page, server.url, key)
    assert _defaults(page, server) == ("a100-sxm4", "a100-sxm4")
    held = user.launch(gpu="a100-sxm4", type="on-demand", command=["sleep", "3600"])
    wait_until(lambda: user.instance(held["id"])["status"] == "running", what="a100 held")
    assert _defaults(page, server) == ("l40s", "l40s")  # a100's only GPU is taken
    user.stop(held["id"])
