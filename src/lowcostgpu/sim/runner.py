"""The simulation loop: the real engine, a virtual clock, and simulated workloads.

The simulator is not a second scheduler. Every decision — queueing, placement, reclaim, the drain
and its deadlines, requeue — is taken by `core.engine` (`launch`, `report`, `tick`), exactly as
the server takes it. The simulator only plays the world around it: jobs arrive, the effects the
engine returns (`StartWorkload`, `SignalWorkload`, `KillWorkload`, `ReleaseAllocation`,
`EmitEvent`) are carried out on simulated workloads, and what those workloads do (start, save a
checkpoint, exit) is reported back with `engine.report`. `engine.tick` runs at `next_wake`.
This module is the loop and the customers; carrying out the effects and reporting what the
workloads do is `sim.shell.Shell`'s, which `Simulation` is.

On-demand requests are answered at once or refused with `InsufficientCapacity`, as in production.
A refused request here is a customer who keeps asking: it waits and tries again whenever GPUs of
its pool are released or new preemptible work starts there (the only two things that can make it
fit), and its wait is measured. Each refusal is told to the engine (`engine.refused`), which holds
the pool for the customer's retry, as the server does. The server's hold lasts
`on_demand_hold_s` and each retry renews it; a simulated customer asks continuously, so its hold
is made to last until a placement in the pool ends it (the same effect, without a retry event
every few minutes for days).

Finished instances leave the engine state (`sim.shell`), so an event costs the same however long
the run. The runner keeps its own per-event cost the same way: no scan or copy of every live
instance per event (the final result is the one O(jobs) step).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from lowcostgpu.core import engine
from lowcostgpu.core.engine import EngineState, LaunchSpec
from lowcostgpu.core.scheduler import SchedulerConfig
from lowcostgpu.core.snapshot import FleetSnapshot
from lowcostgpu.domain.capacity import CapacityClass, PoolKey
from lowcostgpu.domain.errors import InsufficientCapacity, InvalidRequest, NotFound
from lowcostgpu.sim.clock import ARRIVAL, RETRY, SAMPLE
from lowcostgpu.sim.eta import EtaLog, mean_work_by_pool
from lowcostgpu.sim.jobs import Trace
from lowcostgpu.sim.reclaims import ReclaimLosses
from lowcostgpu.sim.result import Sample, SimResult
from lowcostgpu.sim.shell import Shell
from lowcostgpu.sim.workload import Workload

ACCOUNT = "sim"
_OD = CapacityClass.ON_DEMAND


class Simulation(Shell):
    """One run of a trace: the loop, the arrivals and the waiting customers, over its `Shell`."""

    def __init__(
        self,
        trace: Trace,
        config: SchedulerConfig,
        *,
        grace_period_s: int = 300,
        sample_s: int | None = None,
        on_progress: Callable[[int], None] | None = None,
        hidden: frozenset[str] = frozenset(),
        measure_reclaims: bool = True,
        save_when_warned: bool = True,
    ) -> None:
        super().__init__(
            config,
            EngineState(FleetSnapshot.build(trace.hosts)),
            grace_period_s=grace_period_s,
            hidden=hidden,
            save_when_warned=save_when_warned,
        )
        self.trace = trace
        self.on_progress = on_progress
        self.launched: dict[str, None] = {}  # ids in the order the engine took them in
        self.samples: list[Sample] = []
        self.rejected: dict[str, str] = {}
        self.reclaims = ReclaimLosses()
        self.etas = EtaLog(mean_work_by_pool(trace.jobs))
        # The clairvoyant dry run at each reclaim (`sim.reclaims`): it weighs every host of the
        # pool (its cost cannot be bounded), so a speed measurement may leave it out.
        self.measure_reclaims = measure_reclaims
        self.next_job = 0
        self.sample_s = sample_s or _default_sample_s(trace)

    # --- The loop ---------------------------------------------------------------------------

    def run(self) -> SimResult:
        horizon = self.trace.horizon_s
        self._push_next_arrival()
        self.heap.push(0, SAMPLE, ("sample", "", ""))
        while len(self.heap):
            at = self.heap.peek_time()
            if horizon is not None and at is not None and at > horizon:
                break
            _, _, (kind, key, alloc) = self.heap.pop()
            self._handle(kind, key, alloc)
            if self.on_progress is not None and self.heap.popped % 4096 == 0:
                self.on_progress(self.heap.now)
        end = horizon if horizon is not None else self.heap.now
        self._account(end)
        live = self.state.instances
        # Archived first (in the order they finished), then the live ones in launch order.
        instances = {**self.archive, **{i: live[i] for i in self.launched if i in live}}
        return SimResult(
            trace=self.trace,
            policy=self.config.policy.name,
            end_s=end,
            workloads=self.workloads,
            instances=instances,
            samples=self.samples,
            busy_gpu_s=dict(self.busy_gpu_s),
            rejected=self.rejected,
            events=self.heap.popped,
            engine_calls=self.engine_calls,
            min_runtime_s=self.config.min_runtime_s,
            reclaims=self.reclaims,
            etas=self.etas,
            lost_work_credits=self.credits.credits,
            credited_true_loss_gpu_s=self.credits.credited_true_loss_gpu_s,
            warnings=self.warnings,
        )

    def _handle(self, kind: str, key: str, alloc: str) -> None:
        now = self.heap.now
        if kind == "arrive":
            self._arrive(now)
        elif kind == "tick":
            self.ticks.discard(now)
            self._apply(engine.tick(self.state, now, self.config))
            self.engine_calls += 1
        elif kind == "retry":
            self._retry(PoolKey(*key.split("/", 1)), now)
        elif kind == "sample":
            self._sample(now)
        else:
            self._workload_event(kind, key, alloc, now)

    def _push_next_arrival(self) -> None:
        if self.next_job < len(self.trace.jobs):
            job = self.trace.jobs[self.next_job]
            self.heap.push(max(job.submit_s, self.heap.now), ARRIVAL, ("arrive", job.id, ""))

    # --- Jobs arrive ------------------------------------------------------------------------

    def _arrive(self, now: int) -> None:
        job = self.trace.jobs[self.next_job]
        self.next_job += 1
        self._push_next_arrival()
        self.workloads[job.id] = Workload(job, submitted_at=now)
        self._launch(job.id, now)

    def _launch(self, job_id: str, now: int) -> bool:
        """Launch through the engine; False when an on-demand request is refused for now."""
        wl = self.workloads[job_id]
        job = wl.job
        spec = LaunchSpec(
            job.id,
            job.pool,
            job.gpus,
            job.capacity_class,
            ACCOUNT,
            True,
            self.grace_period_s,
            nodes=job.nodes,
            hold_survivors_s=job.hold_survivors_s,
        )
        before = self.state
        try:
            step = engine.launch(before, spec, now, self.config)
        except InsufficientCapacity:
            self.engine_calls += 1
            self.waiting.setdefault(job.pool, {})[job_id] = None  # keeps its place if there
            self._hold(job.pool, job.gpus, now, job.id)
            return False
        except (NotFound, InvalidRequest) as exc:
            self.rejected[job_id] = exc.message
            return True
        self.engine_calls += 1
        self.launched[job_id] = None
        wl.launched_at = now
        if self.measure_reclaims:
            self.reclaims.measure(
                before, spec, step, now, self.config, self._loss_if_noticed_s, self._gpus_of
            )
        self._apply(step)
        if not job.capacity_class.preemptible:
            return True
        self.etas.queued(self.state, job_id, now)
        return True

    def _retry(self, pool: PoolKey, now: int) -> None:
        """Refused on-demand requests ask again, oldest first; one that is refused again stops
        every request at least as big behind it (it cannot fit either): once a one-GPU request
        is refused, the rest are not looked at, so a retry costs O(requests tried), not
        O(requests waiting). Launched requests leave the list; the others keep their places."""
        self.retry_due.discard(pool)
        queue = self.waiting.setdefault(pool, {})
        refused_from: int | None = None
        launched: list[str] = []
        for job_id in queue:  # nothing below adds to or takes from `queue` while it is walked
            gpus = self.workloads[job_id].job.gpus
            if refused_from is not None and gpus >= refused_from:
                if refused_from <= 1:
                    break  # every request asks for at least one GPU
            elif self._launch(job_id, now):
                launched.append(job_id)
            else:  # still in the waiting list, at its place
                refused_from = gpus if refused_from is None else min(refused_from, gpus)
        for job_id in launched:
            del queue[job_id]

    def _hold(self, pool: PoolKey, gpus: int, now: int, job_id: str) -> None:
        """Tell the engine of the refusal: the pool is held while the customer keeps asking
        (each job is a customer of its own: its retries keep its id)."""
        if self.config.on_demand_hold_s <= 0:
            return
        horizon = self.trace.horizon_s
        if horizon is not None:  # to the end of the run, unless a placement ends it sooner
            asking = replace(self.config, on_demand_hold_s=max(1, horizon - now + 1))
            self._apply(engine.refused(self.state, pool, gpus, now, asking, job_id))
            return
        # No horizon (run until the last job is done): a far hold would keep the run going, so
        # the customer asks again when the server's hold would end, which renews it.
        had = self.state.holds.get(pool)
        self._apply(engine.refused(self.state, pool, gpus, now, self.config, job_id))
        hold = self.state.holds.get(pool)
        if hold is not None and (had is None or had.until != hold.until):
            self.heap.push(hold.until, RETRY, ("retry", f"{pool.region}/{pool.gpu_type}", ""))

    # --- Measurements -----------------------------------------------------------------------

    def _sample(self, now: int) -> None:
        queued = sum(len(q) for q in self.state.fleet.queues.values())
        waiting = sum(len(w) for w in self.waiting.values())
        self.samples.append(
            Sample(
                now, self.running[_OD], self.running[CapacityClass.INTERRUPTIBLE], queued, waiting
            )
        )
        horizon = self.trace.horizon_s
        more = len(self.heap) > 0 if horizon is None else now + self.sample_s <= horizon
        if more:
            self.heap.push(now + self.sample_s, SAMPLE, ("sample", "", ""))


def _default_sample_s(trace: Trace) -> int:
    """About 400 samples over the run, never closer than a minute."""
    end = trace.horizon_s
    if end is None:
        end = max((j.submit_s + j.work_s for j in trace.jobs), default=3600)
    return max(60, end // 400)
