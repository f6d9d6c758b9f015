"""Through a real server: one account's start that keeps failing delays no other account."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from api_server import Api, serving

from lowcostgpu.client.api import Client
from lowcostgpu.client.records import Instance
from lowcostgpu.core.retries import RetryPolicy
from lowcostgpu.ports.runtime import Runtime, WorkloadStart

HOLD = ["sleep", "600"]


class DoomedStarts:
    """The server's own runtime, except that a start whose env has DOOM raises (as a volume the
    file system refuses did: `OSError: [Errno 27] File too large`)."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.doomed = 0

    def start(self, start: WorkloadStart) -> None:
        if "DOOM" in start.env:
            self.doomed += 1
            raise OSError(27, "File too large")
        self.runtime.start(start)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.runtime, name)


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    yield from serving(tmp_path_factory)


def wait_for(user: Client, instance_id: str, statuses: set[str], timeout_s: float = 20) -> Instance:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = user.instance(instance_id)
        if found["status"] in statuses:
            return found
        time.sleep(0.05)
    raise AssertionError(f"{instance_id} never reached {statuses}: {user.instance(instance_id)}")


def test_a_start_that_keeps_failing_delays_no_other_accounts_launch(api: Api) -> None:
    wired = api.running.wired
    doomed = DoomedStarts(wired.runner.runtime)
    wired.runner.runtime = doomed  # type: ignore[assignment]
    policy = RetryPolicy(first_backoff_s=1, max_backoff_s=1, max_attempts=4)
    wired.plane.config = replace(wired.plane.config, effect_retry=policy)
    _, a = api.account("tenant-a")
    _, b = api.account("tenant-b")
    with a, b:
        bad = a.launch(gpu="a100-sxm4", type="interruptible", command=HOLD, env={"DOOM": "1"})
        assert bad["status"] == "starting"  # answered: the failure is the entry's, not the API's
        other = b.launch(gpu="a100-sxm4", type="on-demand", gpus=1, command=HOLD)
        wait_for(b, other["id"], {"running"}, timeout_s=10)  # the doomed start retries meanwhile
        queued = b.launch(gpu="a100-sxm4", type="interruptible", command=HOLD)
        failed = wait_for(a, bad["id"], {"failed"})
        assert doomed.doomed == 4
        assert "OSError: File too large (errno 27)" in str(failed["failure_reason"])
        assert "gave up after 4 attempts" in str(failed["failure_reason"])
        wait_for(b, queued["id"], {"running"})  # its freed GPU goes to the next in the queue
        assert b.instance(other["id"])["status"] == "running"
        for i in (other["id"], queued["id"]):
            b.stop(i)


def test_the_log_of_a_run_placed_but_not_started_yet_is_empty_not_missing(api: Api) -> None:
    wired = api.running.wired
    wired.runner.runtime = DoomedStarts(wired.runner.runtime)  # type: ignore[assignment]
    policy = RetryPolicy(first_backoff_s=1, max_backoff_s=1, max_attempts=1000)
    wired.plane.config = replace(wired.plane.config, effect_retry=policy)
    _, user = api.account("tenant-logs")
    with user:
        waiting = user.launch(
            gpu="a100-sxm4", type="interruptible", command=HOLD, env={"DOOM": "1"}
        )
        wait_for(user, waiting["id"], {"starting"})  # placed; its start never carried out
        assert user.logs(waiting["id"]) == ""
        user.stop(waiting["id"])
