"""The multi-node part of the instance state machine: what a gang's members share.

A multi-node instance (`--nodes N`) is one instance whose N members each hold an allocation on
a host of their own (`InstanceState.members`). `core.lifecycle` decides what each event means
for the instance; these are the steps that differ for a gang: one start per member with its
rank, a member's exit (the run ends at the last clean exit, or at once on a failure, killing
the rest), and which hosts a reclaimed gang keeps (`hold_survivors_s`). Pure, as the lifecycle.
"""

from __future__ import annotations

from dataclasses import replace

from lowcostgpu.core.drain import Reclaimed
from lowcostgpu.core.effects import Effect, KillWorkload, StartWorkload
from lowcostgpu.core.instance_state import (
    InstanceState,
    Result,
    Run,
    checked_status,
    close_run,
    evolve,
    instance_event,
    release_gpus,
    to_status,
)
from lowcostgpu.domain.capacity import Timestamp
from lowcostgpu.domain.events import Reason
from lowcostgpu.domain.status import InstanceStatus

_I = InstanceStatus


def hosts_of(s: InstanceState) -> list[str]:
    """The hosts it holds, by rank."""
    return [str(s.host_id), *(m.host_id for m in s.members)]


def start_effects(s: InstanceState) -> list[Effect]:
    """One start per member, rank 0 first; each knows its rank and rank 0's host."""
    assert s.allocation_id is not None and s.host_id is not None
    first = StartWorkload(s.id, s.allocation_id, s.host_id, s.gpu_indices, s.restart_count)
    if not s.members:
        return [first]
    ranked = [
        StartWorkload(s.id, m.allocation_id, m.host_id, m.gpu_indices, s.restart_count)
        for m in s.members
    ]
    return [
        replace(start, rank=rank, nodes=s.nodes, master_host_id=s.host_id)
        for rank, start in enumerate([first, *ranked])
    ]


def member_rank(s: InstanceState, allocation_id: str) -> int | None:
    """The member a report is about: "" is rank 0 (a report that does not say); None when it
    names an allocation this run does not hold (a stale report)."""
    return 0 if not allocation_id else s.rank_of(allocation_id)


def kill_the_rest(s: InstanceState, rank: int) -> list[Effect]:
    """SIGKILL for a gang's members still running after member `rank` ended the run."""
    ids = s.allocation_ids()
    return [
        KillWorkload(s.id, a) for r, a in enumerate(ids) if r != rank and r not in s.exited_ranks
    ]


def member_exited(s: InstanceState, rank: int, exit_code: int | None, now: Timestamp) -> Result:
    """A running gang's member exited. A clean exit waits for the others (the gang succeeds
    when every member has exited cleanly); any other exit fails the gang at once, and its
    other members are killed: a gang never runs short of a member."""
    clean = exit_code == 0 or s.completed_reported
    if clean:
        s = evolve(s, exited_ranks=s.exited_ranks | {rank}, exit_code=exit_code)
        if len(s.exited_ranks) < s.nodes:
            return s, []
        s = to_status(close_run(s, now), _I.SUCCEEDED)
        return release_gpus(
            s, [instance_event(s, Reason.SUCCEEDED, "succeeded", now, exit_code=exit_code)]
        )
    killed = kill_the_rest(s, rank)
    why = "exited without an exit code" if exit_code is None else f"exited {exit_code}"
    reason = f"rank {rank} {why}"
    s = close_run(evolve(s, exit_code=exit_code), now)
    s = evolve(s, status=checked_status(s, _I.FAILED), failure_reason=reason)
    words = (
        f"failed: the workload's {reason}, so its {s.nodes - 1} other member(s) were stopped; "
        f"`lowcostgpu logs {s.id}` shows its output"
    )
    event = instance_event(s, Reason.FAILED, words, now, exit_code=exit_code, rank=rank)
    s, fx = release_gpus(s, [event])
    return s, killed + fx


def survivors_of(s: InstanceState, ev: Reclaimed) -> tuple[str, ...]:
    """The hosts a reclaimed gang keeps (`hold_survivors_s`): all but the victim member's."""
    if not s.members or not s.hold_survivors_s or not s.auto_requeue:
        return ()
    taken = s.host_of(ev.allocation_id) if ev.allocation_id else s.host_id
    return tuple(h for h in hosts_of(s) if h != taken)


def hold_survivors(s: InstanceState, run_id: str, now: Timestamp) -> InstanceState:
    """The requeued gang keeps its surviving hosts for `hold_survivors_s`, billed while held."""
    held = Run(run_id, now, None, gpus=len(s.held_hosts) * s.gpus)
    return evolve(s, held_until=now + s.hold_survivors_s, held_runs=(*s.held_runs, held))
