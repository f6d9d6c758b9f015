"""Fair least-work-lost, the default victim policy: cheap victims without punishing checkpointers.

Plain least-work-lost has a flaw: a job that checkpoints often looks cheap and is chosen again and
again, while a job that never reports a checkpoint is charged everything since its start and is
protected — doing the right thing gets you interrupted, and hiding checkpoints pays. The cost of
reclaiming an allocation here is, in GPU-seconds:

- **work lost**: GPU-seconds since its last reported checkpoint (since its start when it has not
  reported one in this run) — or, for a workload that believably saves at a notice, its save
  time (`Allocation.notice_save_s`: it reported a checkpoint, said it saves at a notice, and the
  largest of its last three save times fits in its grace period). An allocation that has
  **never** reported a checkpoint is *not* protected: its loss is estimated at the fleet's
  typical checkpoint age (a constructor argument the shell computes from the intervals it sees
  reported, with `typical_checkpoint_age_s()`), capped by its runtime — what a typical reporter
  in its place would lose — plus 1 s per `older_non_reporter_per_s` (8) s it has run beyond
  that age. The slope is what keeps lost work near plain least-work-lost's: a non-reporter
  really loses its whole run, so among non-reporters the young go first; it is still gentle (a
  day-old non-reporter is charged 3 h, not 24 h), so a long run is no shelter. Measured in
  docs/simulation.md: without a slope the policy lost 20–28 % more work than least-work-lost;
  with 1 s per 30 s (the default until issue 21) 6.5 %; with 1 s per 8 s and the band, 8–11 %
  less than least-work-lost.
- **requeue**: each GPU sent back through the queue costs `restart_cost_s` (starting again and
  loading the checkpoint) plus `expected_requeue_wait_s` (the wait the shell expects in the pool;
  the pure snapshot cannot know the pool's turnover, so the shell passes it; 0 by default). It is
  the same for every GPU, so it favours freeing fewer GPUs and taking fewer victims.
- **interruption history**: `recent_interruption_cost_s` per GPU for an allocation interrupted
  just now, decaying linearly to 0 over `recent_window_s` (a job interrupted in the last hour is
  very expensive to interrupt again), plus `interruption_rate_cost_s` per GPU per interruption per
  hour of running (all its runs together, at least one hour counted).

**The band** (`band_pct`, `band_slack_s`; off when `band_pct` is None): the requeue and history
terms together are capped, per victim, at `band_pct` % of its work lost plus `band_slack_s` per
GPU. They then only choose among victim sets whose loss is within that band of the cheapest — a
set that loses more is taken only when its extra loss is smaller than what the cheaper set's
fairness terms add, and those are at most the band — instead of adding to the cost without
limit, which let the history terms take victims that lose far more work (docs/simulation.md).

The minimum runtime becomes hard for work that was already interrupted: a restarted allocation
is never reclaimed inside `min_runtime_s` (`shields`), so no job is interrupted twice within its
minimum runtime; a first run inside it stays protected only as in the key (taken when nothing else
can free the GPUs).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Final

from lowcostgpu.core.host_state import SAVER_MARK, SAVER_SPAN, HostState, saver_save_s
from lowcostgpu.core.victim_policy import NO_UNPROTECTED_SET
from lowcostgpu.domain.capacity import Allocation, Timestamp
from lowcostgpu.domain.errors import InvalidRequest

HOUR: Final = 3600
DEFAULT_TYPICAL_CHECKPOINT_AGE_S: Final = 300  # half of a 10-minute interval


def typical_checkpoint_age_s(
    intervals_s: Iterable[int], default_s: int = DEFAULT_TYPICAL_CHECKPOINT_AGE_S
) -> int:
    """The expected age of a typical reporter's last checkpoint: half the median interval.

    A job saving every I seconds, looked at a random moment, saved I/2 seconds ago on average;
    the median (the lower one, an observed value) resists a few odd reporters. Without any
    interval observed yet, `default_s`.
    """
    return typical_age_of_sorted(sorted(i for i in intervals_s if i > 0), default_s)


def typical_age_of_sorted(
    ordered_s: Sequence[int], default_s: int = DEFAULT_TYPICAL_CHECKPOINT_AGE_S
) -> int:
    """`typical_checkpoint_age_s` of positive intervals already in ascending order: O(1), for a
    learner that keeps its window sorted as intervals come and go (`core.checkpoint_ages`)
    instead of sorting it at every report."""
    if not ordered_s:
        return default_s
    return max(1, ordered_s[(len(ordered_s) - 1) // 2] // 2)


@dataclass(frozen=True, slots=True)
class CostParts:
    """One allocation's cost of reclaim, in GPU-seconds, part by part (for the explanation)."""

    lost_gpu_s: int
    lost_estimated: bool  # never reported a checkpoint: the typical age stands in
    requeue_gpu_s: int
    history_gpu_s: int
    # The most the requeue and history terms may add (the band), None: no cap.
    fairness_cap_gpu_s: int | None = None

    @property
    def fairness_gpu_s(self) -> int:
        """What the requeue and history terms add to the loss, after the band's cap."""
        terms = self.requeue_gpu_s + self.history_gpu_s
        return terms if self.fairness_cap_gpu_s is None else min(terms, self.fairness_cap_gpu_s)

    # Seconds a believed save at the notice takes (the loss is then that, not the work since the
    # last checkpoint); None when no claim is believed.
    notice_save_s: int | None = None

    @property
    def total(self) -> int:
        return self.lost_gpu_s + self.fairness_gpu_s


@dataclass(frozen=True, slots=True)
class FairLeastWorkLost:
    """Work lost + requeue + interruption history; non-reporters at the typical checkpoint age."""

    typical_checkpoint_age_s: int = DEFAULT_TYPICAL_CHECKPOINT_AGE_S
    restart_cost_s: int = 120
    expected_requeue_wait_s: int = 0
    recent_window_s: int = HOUR
    recent_interruption_cost_s: int = HOUR
    interruption_rate_cost_s: int = 1800
    # A non-reporter's estimate grows by 1 s per this many seconds of runtime past the typical
    # age (0: flat): among non-reporters the youngest, which truly lose least, go first.
    older_non_reporter_per_s: int = 8
    # The band (see the module's docstring): None adds the fairness terms in full. The default
    # (0 %, 120 s per GPU) lets them decide only between sets whose losses differ by less than
    # 120 GPU-s per GPU: measured on the stress and Alibaba traces (docs/simulation.md, issue 21),
    # it lost 11–32 % less work than the unbanded rule, with no re-interruption inside the
    # minimum runtime.
    band_pct: int | None = 0
    band_slack_s: int = 120
    name: str = "fair-least-work-lost"
    pure_cost: ClassVar[bool] = True  # `core.victim_policy.VictimPolicy`

    def __post_init__(self) -> None:
        for field_name in (
            "typical_checkpoint_age_s",
            "restart_cost_s",
            "expected_requeue_wait_s",
            "recent_interruption_cost_s",
            "interruption_rate_cost_s",
            "older_non_reporter_per_s",
            "band_slack_s",
        ):
            if getattr(self, field_name) < 0:
                raise InvalidRequest(f"{self.name}: {field_name} must be ≥ 0")
        if self.recent_window_s < 1:
            raise InvalidRequest(f"{self.name}: recent_window_s must be ≥ 1")
        if self.band_pct is not None and self.band_pct < 0:
            raise InvalidRequest(f"{self.name}: band_pct must be ≥ 0 (or None: no band)")

    def with_typical_age(self, age_s: int) -> FairLeastWorkLost:
        """The same policy with a new typical checkpoint age (the shell updates it as it learns)."""
        return (
            self
            if age_s == self.typical_checkpoint_age_s
            else replace(self, typical_checkpoint_age_s=age_s)
        )

    # The cost ------------------------------------------------------------------------------

    def parts(self, alloc: Allocation, now: Timestamp) -> CostParts:
        """A non-reporter's loss is estimated (whatever it claims: a claim comes with a
        checkpoint, so one without proves nothing); a reporter's is the work since its last
        checkpoint, or its save time when it believably saves at the notice."""
        estimated = alloc.last_checkpoint_at is None
        if estimated:
            lost = alloc.priced_gpus * self.non_reporter_lost_s(alloc.runtime_s(now))
        else:
            lost = alloc.lost_at_notice_gpu_s(now)
        return self.parts_with_loss(
            alloc, now, lost, estimated, None if estimated else alloc.notice_save_s
        )

    def parts_with_loss(
        self,
        alloc: Allocation,
        now: Timestamp,
        lost_gpu_s: int,
        estimated: bool = False,
        notice_save_s: int | None = None,
    ) -> CostParts:
        """The parts for a given loss (the simulator's yardstick passes the true one)."""
        return CostParts(
            lost_gpu_s=lost_gpu_s,
            lost_estimated=estimated,
            requeue_gpu_s=alloc.priced_gpus * self._requeue_per_gpu_s,
            history_gpu_s=alloc.priced_gpus * self._history_per_gpu_s(alloc, now),
            fairness_cap_gpu_s=self._cap_gpu_s(lost_gpu_s, alloc.priced_gpus),
            notice_save_s=notice_save_s,
        )

    def cost(self, alloc: Allocation, now: Timestamp) -> int:
        return self.parts(alloc, now).total

    def _cap_gpu_s(self, lost_gpu_s: int, gpus: int) -> int | None:
        if self.band_pct is None:
            return None
        return lost_gpu_s * self.band_pct // 100 + gpus * self.band_slack_s

    def _floor_terms_s(self, lost_s: int) -> int:
        """The least the fairness terms add to one GPU that loses `lost_s`: the requeue (history
        is ≥ 0), capped by the band. Never less for a larger loss (the bounds rely on it)."""
        requeue = self._requeue_per_gpu_s
        if self.band_pct is None:
            return requeue
        return min(requeue, lost_s * self.band_pct // 100 + self.band_slack_s)

    def non_reporter_lost_s(self, runtime_s: int) -> int:
        """Per GPU, what a non-reporter is charged: its runtime up to the typical age, then
        1 s per `older_non_reporter_per_s` s beyond it. Never more than its runtime, and never
        less for a longer run (the search's bounds rely on both)."""
        typical = self.typical_checkpoint_age_s
        if runtime_s <= typical:
            return max(0, runtime_s)
        if not self.older_non_reporter_per_s:
            return typical
        return typical + (runtime_s - typical) // self.older_non_reporter_per_s

    @property
    def _requeue_per_gpu_s(self) -> int:
        return self.restart_cost_s + self.expected_requeue_wait_s

    def _history_per_gpu_s(self, alloc: Allocation, now: Timestamp) -> int:
        recent = 0
        if alloc.last_interrupted_at is not None:
            since = max(0, now - alloc.last_interrupted_at)
            if since < self.recent_window_s:
                left = self.recent_window_s - since
                recent = self.recent_interruption_cost_s * left // self.recent_window_s
        if alloc.interruption_count <= 0:
            return recent
        running_s = max(HOUR, alloc.earlier_run_s + alloc.runtime_s(now))
        return recent + self.interruption_rate_cost_s * alloc.interruption_count * HOUR // running_s

    def shields(self, alloc: Allocation, now: Timestamp, min_runtime_s: int) -> bool:
        """A restart after an interruption is never reclaimed inside its minimum runtime."""
        return alloc.interruption_count > 0 and alloc.started_at > now - min_runtime_s

    # Words ---------------------------------------------------------------------------------

    def describe(self, cost: int) -> str:
        if self.band_pct is None:
            return f"{cost} GPU-s of cost (work lost + requeue + interruption history)"
        return (
            f"{cost} GPU-s of cost (work lost + requeue + interruption history, those two "
            f"capped at {self.band_pct} % of the work lost + {self.band_slack_s} s per GPU)"
        )

    def cost_terms(self, alloc: Allocation, now: Timestamp) -> dict[str, Any]:
        """`explain_victim` as figures, for the `Preempted` event's data (`policy.victim_terms`)
        and the operator's view: each term of the cost in GPU-seconds and what it came from."""
        p = self.parts(alloc, now)
        return {
            "lost_gpu_s": p.lost_gpu_s,
            "lost_estimated": p.lost_estimated,
            "typical_checkpoint_age_s": self.typical_checkpoint_age_s,
            "notice_save_s": p.notice_save_s,
            "requeue_gpu_s": p.requeue_gpu_s,
            "history_gpu_s": p.history_gpu_s,
            "fairness_cap_gpu_s": p.fairness_cap_gpu_s,
            "interruption_count": alloc.interruption_count,
            "total_gpu_s": p.total,
        }

    def explain_victim(self, alloc: Allocation, now: Timestamp) -> str:
        """One victim's cost, part by part, in words: the `Preempted` event's `data.reason` and the
        operator's view (never the customer's message)."""
        p = self.parts(alloc, now)
        if p.lost_estimated:
            lost = (
                f"~{p.lost_gpu_s} GPU-s of work (no checkpoint reported: estimated at the fleet's "
                f"typical checkpoint age, {self.typical_checkpoint_age_s} s, plus 1 s per "
                f"{self.older_non_reporter_per_s} s run beyond it)"
            )
        elif p.notice_save_s is not None:
            lost = (
                f"{p.lost_gpu_s} GPU-s (it saves at the notice, in {p.notice_save_s} s by its "
                "reports)"
            )
        else:
            lost = f"{p.lost_gpu_s} GPU-s of work since its last checkpoint"
        history = "never interrupted before"
        if alloc.interruption_count:
            running_h = (alloc.earlier_run_s + alloc.runtime_s(now)) / HOUR
            history = (
                f"interrupted {alloc.interruption_count} times in {running_h:.1f} h of running"
            )
            if alloc.last_interrupted_at is not None:
                history += f", last {max(0, now - alloc.last_interrupted_at)} s ago"
        capped = ""
        if p.fairness_cap_gpu_s is not None and p.fairness_gpu_s < (
            p.requeue_gpu_s + p.history_gpu_s
        ):
            capped = f"; those two capped at {p.fairness_cap_gpu_s} GPU-s by the band"
        return (
            f"{alloc.subject_id} loses {lost}, requeue {p.requeue_gpu_s} GPU-s, "
            f"{history} (+{p.history_gpu_s} GPU-s){capped}"
        )

    # Bounds for the best-first search --------------------------------------------------------

    def gpu_floor_s(self, mark: Timestamp, started_at: Timestamp, now: Timestamp) -> int:
        """The least one GPU can cost: a reporter (mark after its start) loses exactly the time
        since its mark, a possible non-reporter its estimate (no more); history ≥ 0."""
        save_s = saver_save_s(mark)
        if save_s is not None:  # a believed saver: it loses its save time
            return save_s + self._requeue_per_gpu_s
        lost = max(0, now - mark)
        if mark == started_at:
            lost = self.non_reporter_lost_s(lost)
        return lost + self._floor_terms_s(lost)

    def lower_bound(
        self, host: HostState, deficit: int, now: Timestamp, started_by: Timestamp
    ) -> int:
        """The `deficit` cheapest GPUs started by `started_by`, each at its floor.

        A GPU whose mark is not its start has reported a checkpoint: it loses exactly the time
        since the mark, uncapped (a believed saver's mark holds its save time: exactly that).
        One whose mark is its start may be a non-reporter, so it is taken at the
        non-reporter's estimate (exact for one, less than a reporter's whole run).
        The uncapped reporters make the bound tight on hosts that must be emptied, where a
        capped bound tied with the best cost on almost every host.
        """
        requeue, typical = self._requeue_per_gpu_s, self.typical_checkpoint_age_s
        banded = self.band_pct is not None
        floors = []
        for mark, started_at in host.gpu_marks:
            if started_at <= started_by:
                if mark >= SAVER_MARK:  # a believed saver loses exactly its save time
                    floors.append(SAVER_MARK + SAVER_SPAN - mark + requeue)
                    continue
                lost = now - mark if now > mark else 0
                if mark == started_at and lost > typical:
                    lost = self.non_reporter_lost_s(lost)
                floors.append(lost + (self._floor_terms_s(lost) if banded else requeue))
        if len(floors) < deficit:
            return NO_UNPROTECTED_SET
        if deficit == 1:
            return min(floors)
        floors.sort()
        return sum(floors[:deficit])

    def order_bound(self, host: HostState, deficit: int, now: Timestamp) -> int:
        """No GPU on a host costs less than the floor of the host's newest mark (inlined: it is
        called for every host the search reads)."""
        if not host.reclaimable_gpus:
            return 0
        since = now - host.mark_prefix[1]
        lost = self.non_reporter_lost_s(since) if since > self.typical_checkpoint_age_s else since
        lost = max(0, lost)
        return deficit * (lost + self._floor_terms_s(lost))


FAIR_LEAST_WORK_LOST = FairLeastWorkLost()
