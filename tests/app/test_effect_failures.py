"""An effect that fails, whatever it raises, blocks no one: it is recorded on its entry, retried
with backoff, and a start given up fails its own instance with the reason."""

from __future__ import annotations

from dataclasses import replace

import pytest
from plane_world import World

from lowcostgpu.adapters.fakes import FakeRuntime, FakeVolumes
from lowcostgpu.app.launch import LaunchRequest
from lowcostgpu.core.retries import RetryPolicy
from lowcostgpu.domain.errors import InvalidRequest, Unavailable
from lowcostgpu.domain.events import Reason
from lowcostgpu.domain.status import InstanceStatus
from lowcostgpu.ports.runtime import VolumeMount, WorkloadStart
from lowcostgpu.ports.store_records import OutboxEntry

_I = InstanceStatus
ERRORS: list[tuple[Exception, str]] = [
    (OSError(27, "File too large"), "OSError: File too large (errno 27)"),
    (RuntimeError("the runtime broke"), "RuntimeError: the runtime broke"),
    (KeyError("gpu_indices"), "KeyError: 'gpu_indices'"),
]
POLICY = RetryPolicy(first_backoff_s=1, max_backoff_s=8, max_attempts=4)  # waits 1, 2, 4 s


class FailingRuntime(FakeRuntime):
    """Starts of `doomed` raise `error`; kills of `unkillable` allocations raise it too."""

    def __init__(self, world: World, error: Exception) -> None:
        super().__init__(now=world.clock.now)
        self.error = error
        self.doomed_starts = 0
        self.unkillable: set[str] = set()

    def start(self, start: WorkloadStart) -> None:
        if start.argv[0] == "doomed":
            self.doomed_starts += 1
            raise self.error
        super().start(start)

    def kill(self, allocation_id: str) -> None:
        if allocation_id in self.unkillable:
            raise self.error
        super().kill(allocation_id)


class FailingVolumes(FakeVolumes):
    """The volume `big` cannot be made (a file system that refuses its size)."""

    def __init__(self, error: Exception) -> None:
        super().__init__()
        self.error = error
        self.calls = 0

    def ensure(
        self, account_id: str, name: str, size_gb: int, *, region: str | None = None
    ) -> VolumeMount:
        if name == "big":
            self.calls += 1
            raise self.error
        return super().ensure(account_id, name, size_gb, region=region)


def world_with(error: Exception, policy: RetryPolicy = POLICY) -> tuple[World, FailingRuntime]:
    w = World()
    runtime = FailingRuntime(w, error)
    w.runtime = w.wired.runner.runtime = w.plane.runtime = runtime
    w.wired.runner.volumes = FailingVolumes(error)
    w.plane.config = replace(w.plane.config, effect_retry=policy)
    return w, runtime


def doomed(via: str) -> LaunchRequest:
    if via == "volume":
        return LaunchRequest(
            "acme", "a100-sxm4", "interruptible", 2, command=("t",), volume="big:1GB"
        )
    return LaunchRequest("acme", "a100-sxm4", "interruptible", 2, command=("doomed",))


def attempts_of(w: World, via: str) -> int:
    volumes = w.wired.runner.volumes
    assert isinstance(volumes, FailingVolumes) and isinstance(w.runtime, FailingRuntime)
    return volumes.calls if via == "volume" else w.runtime.doomed_starts


def start_entry(w: World) -> OutboxEntry:
    [entry] = [e for e in w.store.pending_outbox() if e.kind == "StartWorkload"]
    return entry


@pytest.mark.parametrize("via", ["start", "volume"])
@pytest.mark.parametrize(("error", "words"), ERRORS)
def test_a_failing_start_delays_no_other_launch_and_fails_its_instance_after_the_limit(
    error: Exception, words: str, via: str
) -> None:
    w, _ = world_with(error)
    bad = w.plane.launch(doomed(via)).state.id  # answered: the failure is the entry's
    other = w.plane.launch(LaunchRequest("beta", "a100-sxm4", "on-demand", 2, command=("s",)))
    assert w.runtime.running() == [w.allocation(other.state.id)]  # started right after its commit
    w.tick()
    assert w.store.instance(other.state.id).state.status is _I.RUNNING
    for wait_s in (1, 2, 4):  # each retry when due, and every tick goes on meanwhile
        assert w.store.instance(bad).state.status is _I.STARTING
        w.tick(wait_s)
    failed = w.store.instance(bad).state
    assert attempts_of(w, via) == 4
    assert failed.status is _I.FAILED and failed.gpu_indices == ()
    assert failed.failure_reason == f"{words} (gave up after 4 attempts)"
    [event] = [e for e in w.store.events() if e.object_id == bad and e.reason is Reason.FAILED]
    assert words in event.message
    assert not [e for e in w.store.pending_outbox() if e.kind == "StartWorkload"]
    assert w.store.instance(other.state.id).state.status is _I.RUNNING


@pytest.mark.parametrize(("max_attempts", "status"), [(3, _I.STARTING), (2, _I.FAILED)])
def test_a_start_is_given_up_at_its_attempt_limit_and_not_before(
    max_attempts: int, status: InstanceStatus
) -> None:
    """Two attempts made: a limit of 3 keeps trying, a limit of 2 gives up."""
    w, runtime = world_with(RuntimeError("boom"), replace(POLICY, max_attempts=max_attempts))
    bad = w.plane.launch(doomed("start")).state.id
    w.tick(1)
    assert runtime.doomed_starts == 2
    assert w.store.instance(bad).state.status is status


@pytest.mark.parametrize(("after_s", "retried"), [(3, False), (4, True)])
def test_a_retry_waits_for_its_doubled_backoff(after_s: int, retried: bool) -> None:
    """After the third failure the wait is 4 s: 3 s later nothing is tried, 4 s later it is."""
    w, runtime = world_with(RuntimeError("boom"))
    w.plane.launch(doomed("start"))
    w.tick(1)
    w.tick(2)
    entry = start_entry(w)
    assert (entry.attempts, entry.next_attempt_at) == (3, w.clock.now() + 4)
    assert entry.last_error == "RuntimeError: boom"
    w.tick(after_s)
    assert runtime.doomed_starts == 3 + retried


def test_the_backoff_is_capped() -> None:
    w, _ = world_with(RuntimeError("boom"), RetryPolicy(1, 4, max_attempts=10))
    w.plane.launch(doomed("start"))
    for wait_s in (1, 2, 4, 4):
        w.tick(wait_s)
    entry = start_entry(w)
    assert (entry.attempts, entry.next_attempt_at - w.clock.now()) == (5, 4)


def test_a_restarted_server_keeps_the_retry_state() -> None:
    w, runtime = world_with(OSError(27, "File too large"))
    bad = w.plane.launch(doomed("start")).state.id
    w.tick(1)  # two attempts, the next one due in 2 s
    restarted = World(store=w.store)
    restarted.plane.ids = w.plane.ids  # ids go on where the first server's stopped
    restarted.runtime = restarted.wired.runner.runtime = restarted.plane.runtime = runtime
    restarted.plane.config = replace(restarted.plane.config, effect_retry=POLICY)
    restarted.clock.at = w.clock.now() + 1
    restarted.plane.tick()
    assert runtime.doomed_starts == 2  # not due yet: the restart did not reset the backoff
    other = restarted.plane.launch(
        LaunchRequest("beta", "a100-sxm4", "on-demand", 2, command=("s",))
    )
    assert runtime.running() == [other.state.allocation_id]
    restarted.tick(1)
    restarted.tick(4)
    assert runtime.doomed_starts == 4  # the count went on from 2: given up at the limit
    assert w.store.instance(bad).state.status is _I.FAILED


def test_a_refused_start_fails_at_once_and_an_unreachable_runtime_never_gives_up() -> None:
    w, runtime = world_with(InvalidRequest("the image cannot be found"))
    bad = w.plane.launch(doomed("start")).state.id
    assert runtime.doomed_starts == 1
    assert w.store.instance(bad).state.failure_reason == "the image cannot be found"
    w, runtime = world_with(Unavailable("the runtime is down"))
    bad = w.plane.launch(doomed("start")).state.id
    for _ in range(6):
        w.tick(8)
    assert runtime.doomed_starts == 7 > POLICY.max_attempts
    assert w.store.instance(bad).state.status is _I.STARTING
    assert start_entry(w).last_error == "the runtime is down"


def test_a_start_of_an_instance_stopped_meanwhile_is_dropped() -> None:
    w, runtime = world_with(RuntimeError("boom"))
    bad = w.plane.launch(doomed("start")).state.id
    w.plane.stop(bad)
    w.tick(1)
    assert runtime.doomed_starts == 1  # no longer applies: not tried again
    assert not [e for e in w.store.pending_outbox() if e.kind == "StartWorkload"]
    w.tick(300)  # the drain of a workload that never started ends at its deadline
    assert w.store.instance(bad).state.status is _I.STOPPED


def test_a_kill_that_keeps_failing_still_ends_its_instance_and_is_recorded() -> None:
    w, runtime = world_with(OSError(5, "Input/output error"))
    i = w.plane.launch(LaunchRequest("acme", "a100-sxm4", gpus=2, command=("t",))).state.id
    w.tick()
    runtime.unkillable.add(w.allocation(i))
    w.plane.stop(i)
    w.tick(300)  # the deadline: SIGKILL fails, the instance ends all the same
    assert w.store.instance(i).state.status is _I.STOPPED
    [kill] = [e for e in w.store.pending_outbox() if e.kind == "KillWorkload"]
    assert kill.last_error == "OSError: Input/output error (errno 5)"
    for wait_s in (1, 2, 4):  # the orphan sweep fails too, and stops no tick
        w.tick(wait_s)
    assert not [e for e in w.store.pending_outbox() if e.kind == "KillWorkload"]  # given up
    other = w.plane.launch(LaunchRequest("beta", "a100-sxm4", "on-demand", 8, command=("s",)))
    assert other.state.status is _I.STARTING
