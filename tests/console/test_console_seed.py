"""The seed scenario seen in the console, live: an interruptible pytorch run checkpoints, an
on-demand launch reclaims its GPU, and the instance's page — opened once, never reloaded — shows
the Preempted event, the checkpoint step it stopped at, and the restart that resumed from it."""

from __future__ import annotations

from typing import Any

import pytest
from console_server import Server, sign_in

from waiting import wait_until

pytest.importorskip("torch")

TRAIN_ARGS = ["--steps", "80", "--every-steps", "10", "--step-delay-s", "0.1"]
TIMEOUT_MS = 120_000


def _checkpointed(page: Any, at_least: int) -> int:
    """The last checkpoint step the page shows, once it is at least `at_least`."""
    page.wait_for_function(
        "n => Number(document.querySelector('#last-step .value')?.textContent) >= n",
        arg=at_least,
        timeout=TIMEOUT_MS,
    )
    return int(page.inner_text("#last-step .value"))


def test_the_instance_page_shows_preemption_checkpoint_and_resume_as_they_happen(
    server: Server, page: Any
) -> None:
    _, key, client = server.account("seed")
    with client:
        inst = client.launch(
            gpu="a100-sxm4",
            type="interruptible",
            template="pytorch",
            command=TRAIN_ARGS,
            volume="ckpts:1GB",
            grace_period_s=10,
        )
        sign_in(page, server.url, key)
        page.goto(f"{server.url}/console/#/instances/{inst['id']}")
        page.wait_for_selector("#timeline")
        page.evaluate("window.__notReloaded = true")
        shown = _checkpointed(page, 10)
        # The header's step comes with the instance, the timeline's rows with the events, which
        # the page may take in a moment later: wait for that step's row.
        timeline = page.locator("#timeline")
        page.locator("#timeline", has_text=f"step {shown}").wait_for(timeout=TIMEOUT_MS)
        client.launch(gpu="a100-sxm4", type="on-demand", command=["sleep", "4"])
        timeline.locator("td.reason", has_text="Preempted").wait_for(timeout=TIMEOUT_MS)
        timeline.locator("td.reason", has_text="Restarted").wait_for(timeout=TIMEOUT_MS)
        stored = client.instance(inst["id"])
        resumed = next(e for e in client.timeline(inst["id"]) if e["reason"] == "Restarted")
        step = resumed["data"]["resume_step"]
        assert stored["restart_count"] >= 1 and step is not None and step >= shown
        text = page.inner_text("#timeline")
        assert f"last checkpoint step {step}" in text  # the Interrupted row
        assert f"resumed from step {step}" in text  # the Restarted row
        assert page.locator("svg.timeline text", has_text=f"resumed {step}").count() == 1
        assert page.evaluate("window.__notReloaded") is True  # all of it arrived live
        wait_until(
            lambda: client.instance(inst["id"])["status"] == "succeeded",
            TIMEOUT_MS / 1000,
            "the run to finish",
        )
        timeline.locator("td.reason", has_text="Succeeded").wait_for(timeout=TIMEOUT_MS)
