"""The simulation loop: the real engine, a virtual clock, and simulated workloads.

The simulator is not a second scheduler. Every decision — queueing, placement, reclaim, the drain
and its deadlines, requeue — is taken by `core.engine` (`launch`, `report`, `tick`), exactly as
the server takes it. The simulator only plays the world around it: jobs arrive, the effects the
engine returns (`StartWorkload`, `SignalWorkload`, `KillWorkload`, `ReleaseAllocation`,
`EmitEvent`) are carried out on simulated workloads, and what those workloads do (start, save a
checkpoint, exit) is reported back with `engine.report`. `engine.tick` runs at `next_wake`.

On-demand requests are answered at once or refused with `InsufficientCapacity`, as in production.
A refused request here is a customer who keeps asking: it waits and tries again whenever GPUs of
its pool are released or new preemptible work starts there (the only two things that can make it
fit), and its wait is measured. Each refusal is told to the engine (`engine.refused`), which holds
the pool for the customer's retry, as the server does. The server's hold lasts
`on_demand_hold_s` and each retry renews it; a simulated customer asks continuously, so its hold
is made to last until a placement in the pool ends it (the same effect, without a retry event
every few minutes for days).

Instances that have finished leave the engine state with `engine.forget_instances`, as they
leave the server's live state: the engine costs O(what a decision touches), and its state stays
the size of the live work, so an event costs the same however long the run and however many
jobs have been alive before. The runner keeps its own per-event cost the same way: no scan or
copy of every live instance per event (the final result is the one O(jobs) step).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from lowcostgpu.core import engine
from lowcostgpu.core.checkpoint_ages import CheckpointAges
from lowcostgpu.core.effects import (
    Effect,
    EmitEvent,
    KillWorkload,
    ReleaseAllocation,
    SignalWorkload,
    StartWorkload,
)
from lowcostgpu.core.engine import EngineState, EngineStep, LaunchSpec
from lowcostgpu.core.instance_state import LIVE
from lowcostgpu.core.lifecycle import (
    CheckpointReported,
    InstanceState,
    LifecycleEvent,
    WorkloadExited,
    WorkloadStarted,
)
from lowcostgpu.core.scheduler import SchedulerConfig
from lowcostgpu.core.snapshot import FleetSnapshot
from lowcostgpu.domain.capacity import CapacityClass, PoolKey
from lowcostgpu.domain.errors import InsufficientCapacity, InvalidRequest, NotFound
from lowcostgpu.domain.events import Reason
from lowcostgpu.sim.clairvoyant import Clairvoyant
from lowcostgpu.sim.clock import ARRIVAL, REPORT, RETRY, SAMPLE, TICK, EventHeap
from lowcostgpu.sim.credit_log import CreditLog
from lowcostgpu.sim.eta import EtaLog, mean_work_by_pool
from lowcostgpu.sim.jobs import Trace
from lowcostgpu.sim.reclaims import ReclaimLosses
from lowcostgpu.sim.result import Sample, SimResult
from lowcostgpu.sim.risk_figures import WarningLog
from lowcostgpu.sim.workload import Next, Workload

ACCOUNT = "sim"
EXIT_ON_SIGTERM = 143
_DONE = frozenset({Reason.SUCCEEDED, Reason.FAILED, Reason.STOPPED})
_OD = CapacityClass.ON_DEMAND
# The typical checkpoint age is learnt from the last this many reported intervals, and the
# policy is updated every `_AGE_EVERY` new ones (`core.checkpoint_ages`, as the server does).
_AGE_WINDOW = 2000
_AGE_EVERY = 50

Payload = tuple[str, str, str]  # (kind, job id or pool, allocation id)


class Simulation:
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
        self.trace = trace
        self.config = config
        if isinstance(config.policy, Clairvoyant):  # the yardstick reads our workloads
            self.config = replace(config, policy=config.policy.bound(self._loss_if_noticed_s))
        # Jobs that save checkpoints but never report them (the hiding experiment).
        self.hidden = hidden
        self.checkpoint_ages = CheckpointAges(_AGE_WINDOW, refresh_every=_AGE_EVERY)
        self.grace_period_s = grace_period_s
        self.on_progress = on_progress
        self.state = EngineState(FleetSnapshot.build(trace.hosts))
        self.heap: EventHeap[Payload] = EventHeap()
        self.workloads: dict[str, Workload] = {}
        self.archive: dict[str, InstanceState] = {}
        self.launched: dict[str, None] = {}  # ids in the order the engine took them in
        self.owner: dict[str, str] = {}  # allocation id -> job id, while its workload runs
        # Refused on-demand requests, FIFO (a dict as an ordered set: O(1) to find one).
        self.waiting: dict[PoolKey, dict[str, None]] = {}
        self.retry_due: set[PoolKey] = set()
        self.ticks: set[int] = set()
        self.finished: list[str] = []
        self.running = {CapacityClass.ON_DEMAND: 0, CapacityClass.INTERRUPTIBLE: 0}
        self.busy_gpu_s = {CapacityClass.ON_DEMAND: 0, CapacityClass.INTERRUPTIBLE: 0}
        self.busy_since = 0
        self.samples: list[Sample] = []
        self.rejected: dict[str, str] = {}
        self.reclaims = ReclaimLosses()
        self.credits = CreditLog()  # what `--credit-lost-work` would credit (`sim.credit_log`)
        self.etas = EtaLog(mean_work_by_pool(trace.jobs))
        # The clairvoyant dry run at each reclaim (`sim.reclaims`): it weighs every host of the
        # pool (its cost cannot be bounded), so a speed measurement may leave it out.
        self.measure_reclaims = measure_reclaims
        # Preemption-risk warnings given, and whether warned workloads save early then.
        self.warnings = WarningLog(save_when_warned)
        self.engine_calls = 0
        self.depth = 0
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

    def _capacity_changed(self, pool: PoolKey, now: int) -> None:
        if self.waiting.get(pool) and pool not in self.retry_due:
            self.retry_due.add(pool)
            self.heap.push(now, RETRY, ("retry", f"{pool.region}/{pool.gpu_type}", ""))

    # --- Engine steps and their effects -----------------------------------------------------

    def _report(self, job_id: str, event: LifecycleEvent, now: int) -> None:
        self.engine_calls += 1
        self._apply(engine.report(self.state, job_id, event, now, self.config))

    def _apply(self, step: EngineStep) -> None:
        self.state = step.state
        self.credits.saw(step, self._true_loss_gpu_s)
        if step.wake_at is not None and step.wake_at not in self.ticks:
            self.ticks.add(step.wake_at)
            self.heap.push(max(step.wake_at, self.heap.now), TICK, ("tick", "", ""))
        self.depth += 1
        try:
            for effect in step.effects:
                self._effect(effect, self.heap.now)
        finally:
            self.depth -= 1
        if self.depth == 0 and self.finished:
            self._archive_finished()

    def _effect(self, effect: Effect, now: int) -> None:
        if isinstance(effect, StartWorkload):
            self._start(effect, now)
        elif isinstance(effect, SignalWorkload):
            wl = self.workloads[effect.subject_id]
            if wl.is_current(effect.allocation_id) and wl.noticed_at is None:
                exit_at = wl.notice(now, self.grace_period_s)
                if exit_at is not None:
                    self.heap.push(exit_at, REPORT, ("exit", wl.job.id, effect.allocation_id))
        elif isinstance(effect, KillWorkload):
            wl = self.workloads[effect.subject_id]
            if wl.is_current(effect.allocation_id):
                wl.end_run(now)
        elif isinstance(effect, ReleaseAllocation):
            self._released(effect.allocation_id, now)
        elif isinstance(effect, EmitEvent) and effect.object_kind == "instance":
            if effect.reason in _DONE:
                self.finished.append(effect.object_id)
            elif effect.reason is Reason.PREEMPTION_RISK:
                self._warned(effect.object_id, now)

    def _start(self, effect: StartWorkload, now: int) -> None:
        wl = self.workloads[effect.subject_id]
        self._account(now)
        self.running[wl.job.capacity_class] += wl.job.gpus
        self.owner[effect.allocation_id] = wl.job.id
        if effect.rank > 0:
            return  # a gang's other member: the job's run is its rank 0's (`_ended`)
        wl.start(effect.allocation_id, now)
        self._report(wl.job.id, WorkloadStarted(), now)
        self._schedule_next(wl)
        if wl.job.capacity_class.preemptible:
            self._capacity_changed(wl.job.pool, now)  # more that an on-demand request may reclaim
            if wl.interruptions:  # a restart may be shielded until its minimum runtime is over
                pool = f"{wl.job.pool.region}/{wl.job.pool.gpu_type}"
                self.heap.push(now + self.config.min_runtime_s, RETRY, ("retry", pool, ""))

    def _warned(self, job_id: str, now: int) -> None:
        """A `PreemptionRisk` warning: logged; a checkpointer saves early (`sim.risk_figures`),
        reports that checkpoint when it is written, and its checkpoint cycle starts again."""
        wl = self.workloads[job_id]
        if wl.run is None:
            return
        written_at = self.warnings.warned(wl, now, self.grace_period_s)
        if written_at is not None:
            self.heap.push(written_at, REPORT, ("early-save", job_id, wl.run.allocation_id))
            self._schedule_next(wl)  # the events scheduled before are superseded

    def _released(self, allocation_id: str, now: int) -> None:
        job_id = self.owner.pop(allocation_id, None)
        if job_id is None:
            return
        job = self.workloads[job_id].job
        self._account(now)
        self.running[job.capacity_class] -= job.gpus
        self._capacity_changed(job.pool, now)

    def _archive_finished(self) -> None:
        """Finished instances leave the engine state: O(finished · log n)."""
        live = self.state.instances
        done = [i for i in dict.fromkeys(self.finished) if i in live and live[i].status not in LIVE]
        self.finished.clear()
        for instance_id in done:
            self.archive[instance_id] = self.state.instances[instance_id]
        self.state = engine.forget_instances(self.state, done)

    # --- What simulated workloads do --------------------------------------------------------

    def _schedule_next(self, wl: Workload) -> None:
        assert wl.run is not None
        at, what = wl.next_event()
        kind = "checkpoint" if what is Next.CHECKPOINT else "finish"
        self.heap.push(at, REPORT, (kind, wl.job.id, wl.run.allocation_id))

    def _workload_event(self, kind: str, job_id: str, allocation_id: str, now: int) -> None:
        wl = self.workloads[job_id]
        if not wl.is_current(allocation_id):
            return  # that run is over (killed, or interrupted and restarted since)
        if kind == "exit":  # after SIGTERM, at its own pace
            if wl.saves and wl.saved_s > 0:
                self._checkpoint(job_id, wl.saved_s, now)
            wl.end_run(now)
            self._ended(job_id, EXIT_ON_SIGTERM, now)
        elif wl.noticed_at is not None:
            return  # it stopped working at the notice
        elif kind == "early-save":
            self._checkpoint(job_id, wl.saved_s, now)
        elif wl.next_event()[0] != now:
            return  # scheduled before an early save moved the run's cycle: superseded
        elif kind == "checkpoint":
            wl.save_periodic()
            self._checkpoint(job_id, wl.saved_s, now)
            self._schedule_next(wl)
        elif kind == "finish":
            wl.finish(now)
            self._ended(job_id, 0, now)

    def _ended(self, job_id: str, exit_code: int, now: int) -> None:
        """The job's workload exited: every member of a gang at once (the simulated members
        work in step), in one engine call."""
        inst = self.state.instances[job_id]
        if not inst.members:
            self._report(job_id, WorkloadExited(exit_code), now)
            return
        reports = [(job_id, WorkloadExited(exit_code, a)) for a in inst.allocation_ids()]
        self.engine_calls += 1
        self._apply(engine.report_many(self.state, reports, now, self.config))

    def _true_loss_gpu_s(self, job_id: str, at: int) -> int:
        """What the job would truly lose at a notice at `at`, in GPU-seconds."""
        return self._loss_if_noticed_s(job_id, at) * self._gpus_of(job_id)

    def _gpus_of(self, job_id: str) -> int:
        return self.workloads[job_id].job.total_gpus

    def _loss_if_noticed_s(self, job_id: str, now: int) -> int:
        wl = self.workloads.get(job_id)
        return 0 if wl is None else wl.lost_if_noticed_s(now, self.grace_period_s)

    def _checkpoint(self, job_id: str, step: int, now: int) -> None:
        """Report a saved checkpoint (unless the job hides them) and learn the typical interval."""
        if job_id in self.hidden:
            return
        before = self.state.instance(job_id)
        wl = self.workloads[job_id]
        # What the SDK reports with each checkpoint: the save's time, and whether it saves at a
        # notice (its save there fits in the grace period).
        claim = CheckpointReported(
            step, wl.job.checkpoint_cost_s, wl.saves_at_notice(self.grace_period_s)
        )
        self._report(job_id, claim, now)
        self.checkpoint_ages.learn(before, self.state.instance(job_id))
        self.config = self.checkpoint_ages.applied(self.config)

    # --- Measurements -----------------------------------------------------------------------

    def _account(self, now: int) -> None:
        elapsed = now - self.busy_since
        if elapsed > 0:
            for cls, gpus in self.running.items():
                self.busy_gpu_s[cls] += gpus * elapsed
            self.busy_since = now

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
