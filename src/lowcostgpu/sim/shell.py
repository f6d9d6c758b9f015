"""The simulated shell: the engine's state, each step it returns applied, its effects carried out.

`sim.runner.Simulation` is the event loop: what happens when (jobs arrive and launch, refused
on-demand customers ask again, samples are taken, `engine.tick` runs at `next_wake`). This is
what the loop steps through: every engine step goes through `_apply`, which carries out the
step's effects on simulated workloads (`StartWorkload`, `SignalWorkload`, `KillWorkload`,
`ReleaseAllocation`, `EmitEvent`), and what those workloads then do at their own pace (save a
checkpoint, exit after SIGTERM, finish) is reported back with `engine.report`. It is apart from
the loop so that each reads alone: the shell is the world the engine acts on, the loop the
customers and the clock. `Simulation` is a `Shell` (one object, one engine state and one heap);
the shell keeps the refused on-demand requests waiting, and when capacity moves in their pool
(`_capacity_changed`) schedules their retry, which the loop carries out.

Instances that have finished leave the engine state with `engine.forget_instances`, as they
leave the server's live state: the engine costs O(what a decision touches), and its state stays
the size of the live work, so an event costs the same however long the run and however many
jobs have been alive before. The shell keeps its own per-event cost the same way: no scan or
copy of every live instance per event.
"""

from __future__ import annotations

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
from lowcostgpu.core.engine import EngineState, EngineStep
from lowcostgpu.core.instance_state import LIVE
from lowcostgpu.core.lifecycle import (
    CheckpointReported,
    InstanceState,
    LifecycleEvent,
    WorkloadExited,
    WorkloadStarted,
)
from lowcostgpu.core.scheduler import SchedulerConfig
from lowcostgpu.domain.capacity import CapacityClass, PoolKey
from lowcostgpu.domain.events import Reason
from lowcostgpu.sim.clairvoyant import Clairvoyant
from lowcostgpu.sim.clock import REPORT, RETRY, TICK, EventHeap
from lowcostgpu.sim.credit_log import CreditLog
from lowcostgpu.sim.risk_figures import WarningLog
from lowcostgpu.sim.workload import Next, Workload

EXIT_ON_SIGTERM = 143
_DONE = frozenset({Reason.SUCCEEDED, Reason.FAILED, Reason.STOPPED})
# The typical checkpoint age is learnt from the last this many reported intervals, and the
# policy is updated every `_AGE_EVERY` new ones (`core.checkpoint_ages`, as the server does).
_AGE_WINDOW = 2000
_AGE_EVERY = 50

Payload = tuple[str, str, str]  # (kind, job id or pool, allocation id)


class Shell:
    """The engine's state and the simulated workloads it runs; `sim.runner.Simulation` is one."""

    def __init__(
        self,
        config: SchedulerConfig,
        state: EngineState,
        *,
        grace_period_s: int,
        hidden: frozenset[str],
        save_when_warned: bool,
    ) -> None:
        self.config = config
        if isinstance(config.policy, Clairvoyant):  # the yardstick reads our workloads
            self.config = replace(config, policy=config.policy.bound(self._loss_if_noticed_s))
        # Jobs that save checkpoints but never report them (the hiding experiment).
        self.hidden = hidden
        self.checkpoint_ages = CheckpointAges(_AGE_WINDOW, refresh_every=_AGE_EVERY)
        self.grace_period_s = grace_period_s
        self.state = state
        self.heap: EventHeap[Payload] = EventHeap()
        self.workloads: dict[str, Workload] = {}
        self.archive: dict[str, InstanceState] = {}
        self.owner: dict[str, str] = {}  # allocation id -> job id, while its workload runs
        self.ticks: set[int] = set()
        self.finished: list[str] = []
        self.running = {CapacityClass.ON_DEMAND: 0, CapacityClass.INTERRUPTIBLE: 0}
        self.busy_gpu_s = {CapacityClass.ON_DEMAND: 0, CapacityClass.INTERRUPTIBLE: 0}
        self.busy_since = 0
        self.credits = CreditLog()  # what `--credit-lost-work` would credit (`sim.credit_log`)
        # Preemption-risk warnings given, and whether warned workloads save early then.
        self.warnings = WarningLog(save_when_warned)
        self.engine_calls = 0
        self.depth = 0
        # Refused on-demand requests, FIFO (a dict as an ordered set: O(1) to find one), and the
        # pools whose retry is already due.
        self.waiting: dict[PoolKey, dict[str, None]] = {}
        self.retry_due: set[PoolKey] = set()

    def _capacity_changed(self, pool: PoolKey, now: int) -> None:
        """GPUs of `pool` were released, or preemptible work started there: a waiting on-demand
        request may fit now, so the pool's waiting requests retry (once per moment; the loop,
        `sim.runner.Simulation._retry`, walks them)."""
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

    # --- GPUs in use ------------------------------------------------------------------------

    def _account(self, now: int) -> None:
        elapsed = now - self.busy_since
        if elapsed > 0:
            for cls, gpus in self.running.items():
                self.busy_gpu_s[cls] += gpus * elapsed
            self.busy_since = now
