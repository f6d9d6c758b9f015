"""Preemption risk: warn the instances the next on-demand requests would reclaim, before they do.

Our victims are chosen by a pure function of the fleet snapshot (`core.victims`), so the plane
can ask it ahead of time. A pool is *under pressure* when its free GPUs are fewer than the GPUs
that placed on-demand launches asked for in it over the last `risk_window_s`, or while an
on-demand hold runs in it (`core.holds`: a customer was just refused and will retry; a refusal
counts through its hold, so that a customer retrying is not counted at every retry). Under
pressure, the recent on-demand requests are replayed, in the order they came, on a copy of the
snapshot (`place_on_demand`, then `apply_plan`: a dry run, the engine's state is not changed):
what the replay reclaims is what the same demand would reclaim if it came again now. Those
instances are *at risk*: each gets one `PreemptionRisk` event (to its owner only; the event names
no other allocation, no on-demand customer) and the metadata endpoint answers
`{"action": "none", "risk": "next"}` for it, so that its workload can save a checkpoint early and
a reclaim, if it comes, finds almost nothing to lose. A preemptible cluster node the replay would
drain gets the event too (to the cluster's owner) and a mark on the node (`MarkNodeRisk`: a label
on Kubernetes, the node's comment on Slurm) that the cluster's own tooling can watch: its pods are
the customer's, not ours to advise one by one. It is advice, not a promise.

Why replay the recent requests as they came rather than one size: a reclaim's victims depend on
the request's size (an 8-GPU request frees a whole host, a 1-GPU one the cheapest allocation
anywhere), and the recent mix of sizes is the best forecast we have without a model of the
demand; replaying them in order also spends the pool's free GPUs first (best fit), exactly as
the real requests would, so only the *shortfall* is reclaimed in the dry run. A refused replay
(nothing reclaimable for it now) is skipped, not an end. The hold's request goes first.

An episode: a pool stays at risk while it is under pressure; its warned set only grows (an
instance is warned once per episode, however the victim choice moves as checkpoints come in)
and loses an instance when that instance stops running (reclaimed, finished, stopped), a node when
it stops serving (drained, removed). When the pressure ends the whole set clears, without an
event; the marks of the nodes still serving are cleared (`MarkNodeRisk` with no risk). A new
episode warns again.

Cost: the engine assesses only the pools whose free capacity or demand a step changed (a pool of
an instance or node it touched whose free or reclaimable GPUs moved, the pool of a new arrival,
of a hold that started or ended, of an episode whose oldest arrival left the window): per such
pool O(W + V + R · victim search), W ≤ `MAX_ARRIVALS` the remembered arrivals, V the instances
warned in the episode, R ≤ `MAX_REPLAYED` the requests replayed. Pools the step did not change
cost nothing, and so does a checkpoint report (the victim order moves, but the warned set is not
asked again until GPUs move: on the Alibaba trace this warns 3 % fewer and misses 2 % more of the
reclaims than assessing at every report, and its overhead is a third smaller). On the Alibaba
trace at `--fleet-scale 0.005` the warnings add about half to the simulation's time (2.4 s →
3.7 s).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from immutables import Map

from lowcostgpu.core.effects import EmitEvent, MarkNodeRisk
from lowcostgpu.core.holds import OnDemandHold
from lowcostgpu.core.instance_state import InstanceState
from lowcostgpu.core.nodes import NodeState
from lowcostgpu.core.scheduler import SchedulerConfig, place_on_demand
from lowcostgpu.core.snapshot import FleetSnapshot, apply_plan
from lowcostgpu.core.state import Request
from lowcostgpu.domain.capacity import PoolKey, Timestamp
from lowcostgpu.domain.errors import InsufficientCapacity, InvalidRequest, NotFound
from lowcostgpu.domain.events import Reason
from lowcostgpu.domain.status import InstanceStatus, NodeStatus

# At most this many recent arrivals are remembered per pool (the most recent): the window's
# state stays bounded whatever the demand.
MAX_ARRIVALS = 64
# At most this many requests are replayed per assessment (the most recent): a bound on the cost
# of one assessment; beyond it the warning misses victims of the oldest requests of the window.
MAX_REPLAYED = 32
# Within an episode the demand is replayed at most once per this many seconds (a hold that
# starts replays at once): the replay is a victim search per request, and a busy pool changes
# at almost every step. Measured on the stress trace at 10,000 GPUs, replaying at every change
# made the warnings 96 % of the simulator's time (docs/performance.md).
REPLAY_EVERY_S = 60
RISK_NEXT = "next"
_WARNABLE = frozenset({InstanceStatus.STARTING, InstanceStatus.RUNNING})

Arrival = tuple[Timestamp, int]  # (when, GPUs asked for)
RiskEffect = EmitEvent | MarkNodeRisk


@dataclass(frozen=True, slots=True)
class PoolRisk:
    """One pool's recent on-demand arrivals (oldest first) and its current episode: the warned
    instances with when each was warned, the hold as last assessed, when the oldest arrival
    leaves the window (the engine must look again then, to clear an episode that ended), and
    when the episode's demand was last replayed and, when a change came too soon after that,
    when it is to be replayed (the engine wakes for it)."""

    arrivals: tuple[Arrival, ...] = ()
    warned: Map[str, Timestamp] = field(default_factory=Map)
    hold: OnDemandHold | None = None
    expires_at: Timestamp | None = None
    replayed_at: Timestamp | None = None
    replay_due_at: Timestamp | None = None


_EMPTY = PoolRisk()


@dataclass(frozen=True, slots=True)
class RiskState:
    """Per pool, its `PoolRisk`; soft (not stored, as holds): a restart forgets it (a reload
    keeps it: `app.decider`), and the node providers clear, at a new process's first look, the
    node marks it did not set (`MarkNodeRisk`)."""

    pools: Map[PoolKey, PoolRisk] = field(default_factory=Map)

    def pool(self, pool: PoolKey) -> PoolRisk:
        return self.pools.get(pool, _EMPTY)

    def warned_at(self, pool: PoolKey, instance_id: str) -> Timestamp | None:
        """When `instance_id` (of `pool`) was warned in the pool's current episode, or None."""
        return self.pool(pool).warned.get(instance_id)

    def wake_at(self) -> Timestamp | None:
        """The earliest time an episode's oldest arrival leaves the window, or a deferred
        replay is due. O(pools remembered)."""
        times = [p.expires_at for p in self.pools.values() if p.warned and p.expires_at]
        times += [p.replay_due_at for p in self.pools.values() if p.replay_due_at is not None]
        return min(times, default=None)

    def expired(self, now: Timestamp) -> list[PoolKey]:
        """The pools to assess again at `now`: at risk with their oldest arrival out of the
        window, or with a deferred replay due."""
        return [k for k, p in self.pools.items() if _due(p, now)]

    def with_pool(self, pool: PoolKey, value: PoolRisk) -> RiskState:
        if value == _EMPTY:
            return RiskState(self.pools.delete(pool)) if pool in self.pools else self
        return RiskState(self.pools.set(pool, value))


NO_RISK = RiskState()


def _due(risk: PoolRisk, now: Timestamp) -> bool:
    expired = bool(risk.warned) and risk.expires_at is not None and risk.expires_at <= now
    return expired or (risk.replay_due_at is not None and risk.replay_due_at <= now)


def recent(arrivals: Iterable[Arrival], now: Timestamp, window_s: int) -> tuple[Arrival, ...]:
    """The arrivals still inside the window (at > now − window_s), the last `MAX_ARRIVALS`."""
    kept = tuple(a for a in arrivals if a[0] > now - window_s)
    return kept[-MAX_ARRIVALS:]


def with_arrival(risk: PoolRisk, gpus: int, now: Timestamp, window_s: int) -> PoolRisk:
    """The pool's risk after an on-demand request for `gpus` at `now`."""
    return replace(risk, arrivals=recent((*risk.arrivals, (now, gpus)), now, window_s))


def under_pressure(free_gpus: int, arrivals: Sequence[Arrival], hold_active: bool) -> bool:
    """Fewer free GPUs than the window's on-demand demand, or a hold (a refused customer)."""
    return hold_active or free_gpus < sum(gpus for _, gpus in arrivals)


def next_victims(
    fleet: FleetSnapshot,
    pool: PoolKey,
    requests: Sequence[int],
    now: Timestamp,
    config: SchedulerConfig,
) -> list[str]:
    """The subjects (instance or node ids) whose allocations a replay of `requests` (GPUs each,
    in order) would reclaim now, in the order they would be: a dry run on a copy of `fleet`."""
    victims: list[str] = []
    for k, gpus in enumerate(requests[-MAX_REPLAYED:]):
        subject = f"~risk-dry-run-{k}"
        try:
            plan = place_on_demand(fleet, Request(subject, pool, gpus), now, config)
        except (InsufficientCapacity, InvalidRequest, NotFound):
            continue  # nothing this request could reclaim now (or no such host size)
        victims.extend(p.subject_id for p in plan.preemptions)
        fleet = apply_plan(fleet, plan, now)
    return victims


def assess(
    risk: PoolRisk,
    pool: PoolKey,
    fleet: FleetSnapshot,
    instances: Mapping[str, InstanceState],
    nodes: Mapping[str, NodeState],
    hold: OnDemandHold | None,
    now: Timestamp,
    config: SchedulerConfig,
) -> tuple[PoolRisk, list[RiskEffect]]:
    """The pool's risk at `now` and the effects of the subjects newly warned (`PreemptionRisk`
    events; for a cluster node also its mark, `MarkNodeRisk`), or of an episode's end (the marks
    of the nodes still warned cleared; instances get no event then).

    The end of an episode is seen at every assessment; within one, the demand is replayed (and
    new victims warned) at most every `REPLAY_EVERY_S`, or at once when a hold starts."""
    window_s = config.risk_window_s
    arrivals = recent(risk.arrivals, now, window_s)
    live_hold = hold if hold is not None and hold.until > now else None
    free = fleet.pool_totals.get(pool, (0, 0))[0]
    expires = arrivals[0][0] + window_s if arrivals else None
    if not under_pressure(free, arrivals, live_hold is not None):
        return PoolRisk(arrivals, Map(), live_hold, expires), _marks_cleared(risk, nodes, now)
    kept = {i: at for i, at in risk.warned.items() if _still_warnable(i, instances, nodes)}
    hold_started = live_hold is not None and risk.hold is None
    if (
        risk.replayed_at is not None
        and now - risk.replayed_at < REPLAY_EVERY_S
        and not hold_started
    ):
        warned = Map(kept) if kept != dict(risk.warned) else risk.warned
        due = risk.replayed_at + REPLAY_EVERY_S
        return PoolRisk(arrivals, warned, live_hold, expires, risk.replayed_at, due), []
    requests = ([live_hold.gpus] if live_hold else []) + [gpus for _, gpus in arrivals]
    effects: list[RiskEffect] = []
    why = Pressure(free, sum(gpus for _, gpus in arrivals), window_s, live_hold is not None)
    for subject in next_victims(fleet, pool, requests, now, config):
        if subject in kept:
            continue  # warned already in this episode
        inst, node = instances.get(subject), nodes.get(subject)
        if _warnable(inst):
            assert inst is not None
            effects.append(risk_event(inst, now, why))
        elif _node_warnable(node):
            assert node is not None
            effects.extend(node_risk_effects(node, now, why))
        else:
            continue  # not running (or a standard node: never a victim)
        kept[subject] = now
    warned = Map(kept) if kept != dict(risk.warned) else risk.warned
    return PoolRisk(arrivals, warned, live_hold, expires, now), effects


def _warnable(inst: InstanceState | None) -> bool:
    return inst is not None and inst.capacity_class.preemptible and inst.status in _WARNABLE


def _node_warnable(node: NodeState | None) -> bool:
    """A preemptible node serving its cluster: a pending one holds no GPUs, a cordoned one has
    its notice already (its drain replaces the advice)."""
    return node is not None and node.capacity_class.preemptible and node.status is NodeStatus.READY


def _still_warnable(
    subject: str, instances: Mapping[str, InstanceState], nodes: Mapping[str, NodeState]
) -> bool:
    return _warnable(instances.get(subject)) or _node_warnable(nodes.get(subject))


def _marks_cleared(
    risk: PoolRisk, nodes: Mapping[str, NodeState], now: Timestamp
) -> list[RiskEffect]:
    """At an episode's end, the marks of the warned nodes still serving are cleared (a node
    that was reclaimed meanwhile lost its mark with its drain, `MarkNodeRisk`). O(warned)."""
    return [
        MarkNodeRisk(subject, "", now)
        for subject in sorted(risk.warned)
        if _node_warnable(nodes.get(subject))
    ]


@dataclass(frozen=True, slots=True)
class Pressure:
    """Why a pool is at risk, as its warnings say it: the pool's totals only."""

    free_gpus: int
    demand_gpus: int
    window_s: int
    held: bool

    def why(self) -> str:
        if self.held:
            return "an on-demand customer was just refused in this pool"
        return (
            f"on-demand launches asked for {self.demand_gpus} GPUs here in the last "
            f"{self.window_s // 60} min and {self.free_gpus} are free"
        )

    def data(self, pool: PoolKey) -> dict[str, object]:
        return {
            "risk": RISK_NEXT,
            "pool": str(pool),
            "free_gpus": self.free_gpus,
            "recent_on_demand_gpus": self.demand_gpus,
            "window_s": self.window_s,
            "hold": self.held,
        }


def risk_event(inst: InstanceState, now: Timestamp, pressure: Pressure) -> EmitEvent:
    """The warning, to the instance's owner: what it means and what to do. It names no other
    instance and no on-demand customer, only the pool's totals."""
    message = (
        f"at risk of being reclaimed for on-demand work ({pressure.why()}): it would be among "
        "the next victims; save a checkpoint now so that a reclaim loses little (advice, not a "
        "notice)"
    )
    return EmitEvent(
        "instance",
        inst.id,
        Reason.PREEMPTION_RISK,
        message,
        now,
        inst.account_id,
        pressure.data(inst.pool),
    )


def node_risk_effects(node: NodeState, now: Timestamp, pressure: Pressure) -> list[RiskEffect]:
    """A cluster node's warning: the event and webhook to the cluster's owner, and the mark on
    the node that the cluster's own tooling can watch (its pods are the customer's, not ours to
    advise one by one)."""
    message = (
        f"node {node.id} of cluster {node.cluster_id} is at risk of being reclaimed for "
        f"on-demand work ({pressure.why()}): it would be among the next nodes drained; "
        "checkpoint the work on it now so that a reclaim loses little (advice, not a notice)"
    )
    data = pressure.data(node.pool) | {"cluster_id": node.cluster_id}
    event = EmitEvent("node", node.id, Reason.PREEMPTION_RISK, message, now, node.account_id, data)
    return [event, MarkNodeRisk(node.id, RISK_NEXT, now)]


def node_risk_since(risk: RiskState, node: NodeState) -> Timestamp | None:
    """When a serving preemptible node was warned in its pool's current episode (its mark's
    time), or None: what a cluster's view shows beside the node. O(log n)."""
    return risk.warned_at(node.pool, node.id) if _node_warnable(node) else None


def risk_answer(risk: RiskState, inst: InstanceState | None) -> dict[str, object] | None:
    """The metadata endpoint's answer for an instance at risk and not yet noticed:
    `{"action": "none", "risk": "next", "risk_since": ...}`; None when it is not at risk (the
    endpoint then answers as before: 404 until a notice). O(log n)."""
    if inst is None or not _warnable(inst):
        return None
    since = risk.warned_at(inst.pool, inst.id)
    if since is None:
        return None
    return {"action": "none", "risk": RISK_NEXT, "risk_since": since}
