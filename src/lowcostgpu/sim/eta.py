"""How honest the queue's ETA is: the ETA a queued interruptible job was given, against when it
really started.

At each interruptible launch that the engine queues, the ETA the API would answer at that moment
(`core.eta`, from the same snapshot and deadline index the server reads) is noted; its real start
is the workload's first start. `eta_figures` reports the absolute error (nearest-rank p50 and p90
of |ETA − start|) over the tickets that got an ETA and started, the share of tickets told
"unknown", and how many got an ETA but never started in the run.

Cost: per queued launch O(the pool's hosts) for its capacity plus O(draining instances) for the
known ends; nothing per event otherwise, so the simulator's speed barely moves.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from lowcostgpu.core.engine_state import EngineState
from lowcostgpu.core.eta import PoolGpus, is_held, known_ends
from lowcostgpu.core.queue import queue_entry
from lowcostgpu.domain.status import InstanceStatus
from lowcostgpu.sim.workload import Workload


@dataclass(slots=True)
class EtaLog:
    """The ETA (None: "unknown") each queued interruptible job was given when it was queued."""

    given: dict[str, int | None] = field(default_factory=dict)

    def queued(self, state: EngineState, job_id: str, now: int) -> None:
        """Note the ETA of `job_id` if the launch left it queued (its first enqueue only)."""
        inst = state.instances.get(job_id)
        if inst is None or inst.status is not InstanceStatus.QUEUED or inst.enqueued_at is None:
            return
        if job_id in self.given:
            return
        ends = known_ends(state.instances, state.index.instance_deadline_order, inst.pool)
        held = is_held(state.holds, inst.pool, now)
        gpus = PoolGpus.of(state.fleet, inst.pool, ends, held)
        entry = queue_entry(state.fleet, inst.pool, (inst.enqueued_at, inst.id), now, gpus)
        if entry is not None:
            self.given[job_id] = entry.eta_at


Percentile = Callable[[list[int], float], int | None]


def eta_figures(
    log: EtaLog, workloads: dict[str, Workload], percentile: Percentile
) -> dict[str, Any]:
    """The `queue_eta` figures of the summary (module docstring); `percentile` is the report's
    own (`sim.metrics.percentile`, nearest rank)."""
    errors: list[int] = []
    unknown = never_started = 0
    for job_id, eta_at in log.given.items():
        start = workloads[job_id].first_start
        if eta_at is None:
            unknown += 1
        elif start is None:
            never_started += 1
        else:
            errors.append(abs(eta_at - start))
    queued = len(log.given)
    return {
        "queued_tickets": queued,
        "unknown_share": round(unknown / queued, 4) if queued else 0.0,
        "abs_error_p50_s": percentile(errors, 50),
        "abs_error_p90_s": percentile(errors, 90),
        "measured": len(errors),
        "given_but_never_started": never_started,
    }
