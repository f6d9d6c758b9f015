"""Clusters from the console's form: a bad value shows the API's validation message in the page
and creates nothing; a good one creates the cluster, whose page shows its nodes by compute-class
and takes a new preemptible target."""

from __future__ import annotations

from typing import Any

import httpx
from console_server import Server, sign_in


def _fill(page: Any, gpus_per_node: int, standard: int, desired: int) -> None:
    page.select_option("#create-cluster select[name=gpu]", "h100-sxm")
    page.fill("#create-cluster input[name=gpus_per_node]", str(gpus_per_node))
    page.fill("#create-cluster input[name=standard_nodes]", str(standard))
    page.fill("#create-cluster input[name=desired_preemptible_gpus]", str(desired))
    page.click("#create-cluster button[type=submit]")


def _clusters(server: Server, key: str) -> list[dict[str, Any]]:
    answer = httpx.get(f"{server.url}/v1/clusters", headers={"authorization": f"Bearer {key}"})
    answer.raise_for_status()
    return list(answer.json())


def test_a_bad_target_shows_the_api_message_and_a_good_one_creates_the_cluster(
    server: Server, page: Any
) -> None:
    _, key, _ = server.account("clusters")
    sign_in(page, server.url, key)
    page.goto(f"{server.url}/console/#/clusters")
    page.wait_for_selector("#create-cluster")
    _fill(page, gpus_per_node=2, standard=1, desired=3)  # not a multiple of the node size
    error = page.locator("#form-error .problem")
    error.wait_for()
    assert "multiple" in error.inner_text()
    assert _clusters(server, key) == []
    _fill(page, gpus_per_node=1, standard=1, desired=1)
    page.wait_for_selector("#nodes")
    made = _clusters(server, key)
    assert [(c["gpu"], c["standard_nodes"], c["desired_preemptible_gpus"]) for c in made] == [
        ("h100-sxm", 1, 1)
    ]
    assert page.url.endswith(f"#/clusters/{made[0]['id']}")
    # Each kind of node is waited for: the preemptible one may be drawn before the standard one.
    page.locator("#nodes td", has_text="preemptible").first.wait_for()
    page.locator("#nodes td", has_text="standard").first.wait_for()
    page.fill("#update-target input[name=desired_preemptible_gpus]", "-1")
    page.evaluate("document.querySelector('#update-target input').removeAttribute('min')")
    page.click("#update-target button[type=submit]")
    page.locator("#target-error .problem").wait_for()
    page.fill("#update-target input[name=desired_preemptible_gpus]", "2")
    page.click("#update-target button[type=submit]")
    page.wait_for_function("() => document.querySelector('.stats')?.innerText.includes('/ 2')")
    assert _clusters(server, key)[0]["desired_preemptible_gpus"] == 2
