"""On-demand placement: answered at once, from free GPUs or by reclaiming preemptible ones.

On-demand and standard requests never wait in a queue and are never preempted. A request is placed
on free GPUs when it fits (best fit: the host with the fewest free GPUs that still fit, so whole
hosts stay free for big requests); otherwise the cheapest set of preemptible victims on one host is
reclaimed (`core.victims`); otherwise it is refused with `InsufficientCapacity`, saying what
is free.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from lowcostgpu.core.fairness import FAIR_LEAST_WORK_LOST
from lowcostgpu.core.host_state import HostState
from lowcostgpu.core.snapshot import FleetSnapshot
from lowcostgpu.core.state import Placement, Plan, Preemption, Request
from lowcostgpu.core.victim_policy import VictimPolicy, history_aware
from lowcostgpu.core.victims import VictimSearch, choose_victims
from lowcostgpu.domain.capacity import Allocation, Timestamp
from lowcostgpu.domain.errors import InsufficientCapacity, InvalidRequest, NotFound


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    """The operator's knobs. Times are seconds."""

    # A (re)started preemptible allocation is not reclaimed before this long unless there is no
    # other way to place the on-demand request at all.
    min_runtime_s: int = 300
    # A queue head blocked this long gets a host reserved: later tickets cannot take it.
    head_reservation_after_s: int = 300
    # How many tickets past the head one queue pass may look at for backfill (Slurm's
    # bf_max_job_test plays the same part): bounds a pass over a long queue.
    backfill_window: int = 1000
    # After an on-demand request is refused, one host of its pool is held this long against new
    # preemptible placements, so that the customer's retry finds the freed GPUs (`core.holds`).
    # Two minutes: a retrying client (a script, `launch --wait`) comes back well within it, and
    # longer would leave GPUs idle for a customer who gave up. 0 disables holds.
    on_demand_hold_s: int = 120
    # How victims are chosen: by default `fair-least-work-lost` (`core.fairness`): the work they
    # would lose, non-reporters at the fleet's typical checkpoint age, plus a requeue cost and an
    # interruption-history term (issue 8; figures in docs/simulation.md). DESIGN.md §1's plain
    # least-work-lost and the peers' rules stay available by name (`core.policies`).
    policy: VictimPolicy = field(default=FAIR_LEAST_WORK_LOST)
    # Preemption-risk warnings (`core.risk`): a pool whose free GPUs are fewer than what
    # on-demand launches asked for in it over this window warns the instances the same demand
    # would reclaim. 15 min: about the time a periodic checkpointer needs to see the warning and
    # save. 0 turns warnings off.
    risk_window_s: int = 900

    def __post_init__(self) -> None:
        for name in (
            "min_runtime_s",
            "head_reservation_after_s",
            "on_demand_hold_s",
            "risk_window_s",
        ):
            if getattr(self, name) < 0:
                raise InvalidRequest(f"{name} must be ≥ 0")
        if self.backfill_window < 1:
            raise InvalidRequest("backfill_window must be ≥ 1")


DEFAULT_CONFIG = SchedulerConfig()


def best_fit(hosts: list[HostState], gpus: int, exclude: str | None = None) -> HostState | None:
    """The host with the fewest free GPUs that still fit `gpus` (ties: host id)."""
    best: HostState | None = None
    for state in hosts:
        free = state.free
        if free < gpus or state.host.id == exclude:
            continue
        if best is None or (free, state.host.id) < (best.free, best.host.id):
            best = state
    return best


def lowest_indices(indices: frozenset[int], count: int) -> frozenset[int]:
    return frozenset(sorted(indices)[:count])


def place_on_demand(
    snapshot: FleetSnapshot, request: Request, now: Timestamp, config: SchedulerConfig
) -> Plan:
    """Place the request now, reclaiming preemptible work if needed, or raise."""
    _check_request(snapshot, request)
    host = snapshot.best_fit_free(request.pool, request.gpus)  # `best_fit` by bisection
    if host is not None:
        indices = lowest_indices(host.free_indices, request.gpus)
        return Plan(placements=(_placement(request, host, indices),))
    search = choose_victims(
        snapshot.hosts_by_mark(request.pool),
        request.gpus,
        now,
        config.policy,
        config.min_runtime_s,
        most_free=snapshot.most_free(request.pool),
    )
    if search.best is None:
        raise _insufficient(request, snapshot)
    return _reclaim_plan(request, search, now, config)


def _check_request(snapshot: FleetSnapshot, request: Request) -> None:
    largest = snapshot.largest_host_gpus(request.pool)
    if not largest:
        raise NotFound(
            f"no {request.pool.gpu_type} capacity in region {request.pool.region}",
            hint="see `lowcostgpu fleet` for the pools this fleet has",
        )
    if not 1 <= request.gpus <= largest:
        raise InvalidRequest(
            f"{request.gpus} GPUs cannot be placed on one {request.pool.gpu_type} host",
            hint=f"ask for 1 to {largest} GPUs",
        )


def _placement(request: Request, host: HostState, indices: frozenset[int]) -> Placement:
    return Placement(
        subject_id=request.subject_id,
        host_id=host.host.id,
        pool=request.pool,
        gpu_indices=indices,
        capacity_class=request.capacity_class,
        account_id=request.account_id,
    )


def _reclaim_plan(
    request: Request, search: VictimSearch, now: Timestamp, config: SchedulerConfig
) -> Plan:
    best = search.choices[0]
    order = sorted(best.host.free_indices) + [
        i for v in best.victims for i in sorted(v.gpu_indices)
    ]
    placement = Placement(
        subject_id=request.subject_id,
        host_id=best.host.host.id,
        pool=request.pool,
        gpu_indices=frozenset(order[: request.gpus]),
        capacity_class=request.capacity_class,
        account_id=request.account_id,
        waits_for=frozenset(v.id for v in best.victims),
    )
    preemptions = tuple(
        Preemption(
            allocation_id=v.id,
            subject_id=v.subject_id,
            host_id=v.host_id,
            for_subject=request.subject_id,
            lost_gpu_s=v.work_at_risk_gpu_s(now),
            reason=_explain(search, config.policy, now, v),
            for_account_id=request.account_id,
            policy=_figures(search, config.policy, now, v),
        )
        for v in best.victims
    )
    return Plan(placements=(placement,), preemptions=preemptions)


def _explain(search: VictimSearch, policy: VictimPolicy, now: Timestamp, victim: Allocation) -> str:
    """Why these victims: what they lose, and what the alternatives would have cost — in the
    words `victim`'s owner reads, so the other victims (maybe other accounts') go unnamed."""
    best, alternatives = search.choices[0], search.choices[1:]
    also = len(best.victims) - 1
    names = victim.subject_id + (f" and {also} other allocation(s)" if also else "")
    host = best.host.host.id
    text = f"chosen by {policy.name}: {names} on {host} loses {policy.describe(best.cost)}"
    aware = history_aware(policy)
    if aware is not None:
        text += f" ({aware.explain_victim(victim, now)})"
    if best.protected:
        text += f"; {best.protected} inside the minimum runtime (there was no other choice)"
    if alternatives:
        others = "; ".join(f"{c.host.host.id}: {policy.describe(c.cost)}" for c in alternatives[:3])
        text += f"; alternatives: {others}"
    if search.skipped_hosts:
        skipped = policy.describe(search.skipped_lower_bound or 0)
        text += f"; every other host would lose at least {skipped}"
    if not alternatives and not search.skipped_hosts:
        text += "; no other host could free enough GPUs"
    return text


def _figures(
    search: VictimSearch, policy: VictimPolicy, now: Timestamp, victim: Allocation
) -> dict[str, Any]:
    """`_explain` as figures (GPU-seconds), for the event's data and the operator's view: the
    policy, the cost of the choice, `victim`'s own cost terms when the policy has them, the
    alternatives by host. Names no allocation but `victim` (the others may be other accounts')."""
    best, alternatives = search.choices[0], search.choices[1:]
    figures: dict[str, Any] = {
        "name": policy.name,
        "host_id": best.host.host.id,
        "cost_gpu_s": best.cost,
        "victims": len(best.victims),
        "protected_victims": best.protected,
        "alternatives": [
            {"host_id": c.host.host.id, "cost_gpu_s": c.cost} for c in alternatives[:3]
        ],
        "other_hosts_at_least_gpu_s": search.skipped_lower_bound if search.skipped_hosts else None,
    }
    terms = getattr(policy, "cost_terms", None)
    if terms is not None:
        figures["victim_terms"] = terms(victim, now)
    return figures


def _insufficient(request: Request, snapshot: FleetSnapshot) -> InsufficientCapacity:
    """The refusal, with the pool's totals as the snapshot keeps them: O(host sizes), not a
    sum over the pool's hosts (a refused request is often retried, in bursts)."""
    free, reclaimable = snapshot.pool_totals.get(request.pool, (0, 0))
    largest_block = snapshot.most_free(request.pool)
    return InsufficientCapacity(
        f"no capacity for {request.gpus} × {request.pool.gpu_type} in {request.pool.region}: "
        f"{free} GPUs free (at most {largest_block} on one host), "
        f"{reclaimable} held by preemptible work that can be reclaimed",
        hint="ask for fewer GPUs, another region or GPU type, or launch as interruptible "
        "to wait in the queue",
        free_gpus=free,
        largest_free_block=largest_block,
        reclaimable_gpus=reclaimable,
    )
