"""Volumes in the console: one row per volume (not one per size a launch named), grow one, and
a delete refused while an instance uses it says which, then goes through once it is deleted."""

from __future__ import annotations

from typing import Any

import pytest
from console_server import Server, sign_in

from lowcostgpu.client.volumes import VolumeApi
from lowcostgpu.domain.errors import Conflict
from waiting import wait_until


def test_the_volumes_page_lists_grows_and_deletes_one_row_per_volume(
    server: Server, page: Any
) -> None:
    _, key, client = server.account("volumes-page")
    inst = client.launch(gpu="h100-sxm", command=["sleep", "600"], volume="ckpts:1GB")
    with pytest.raises(Conflict):  # a launch never makes a second ckpts of another size
        client.launch(gpu="h100-sxm", command=["sleep", "600"], volume="ckpts:50GB")
    client.launch(gpu="h100-sxm", command=["sleep", "600"], volume="ckpts")
    page.on("dialog", lambda dialog: dialog.accept())
    sign_in(page, server.url, key)
    page.goto(f"{server.url}/console/#/volumes")
    rows = page.locator("#volumes tbody tr")
    rows.first.wait_for()
    assert rows.count() == 1
    assert "1 GB" in rows.first.inner_text() and inst["id"] in rows.first.inner_text()
    page.fill("input[name=size-ckpts]", "3")
    page.click("#volumes tbody button:has-text('Grow')")
    page.locator("#volume-result .notice").wait_for()  # shown once the table is redrawn
    assert "3 GB" in page.locator("#volumes tbody tr").first.inner_text()
    page.click("#volumes tbody button:has-text('Delete')")
    refusal = page.locator("#volume-result .problem")
    refusal.wait_for()
    assert "in use by" in refusal.inner_text() and inst["id"] in refusal.inner_text()
    for found in client.instances():
        client.stop(found["id"])
    for found in client.instances():
        wait_until(lambda i=found["id"]: client.instance(i)["status"] == "stopped", what="stopped")
        client.delete(found["id"])
    page.click("#volumes tbody button:has-text('Delete')")
    page.locator("#volume-result .notice").wait_for()
    page.locator("p.empty:has-text('No volumes yet')").wait_for()
    assert VolumeApi(client).list() == []
