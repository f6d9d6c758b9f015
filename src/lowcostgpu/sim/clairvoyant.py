"""A yardstick for victim policies: choosing by the work each victim would *really* lose.

No control plane can run this. The true loss of reclaiming a workload depends on what the
workload does at SIGTERM — a job that writes its checkpoint within the grace period loses
nothing (a periodic saver, or one that saves only at a notice), one that never checkpoints loses
its whole run, one whose save does not fit loses what it did since its last periodic save (a
notice-only saver: its whole run) — and the plane only sees the checkpoints, and the save claims,
a workload chooses to report. The simulator knows (`sim.workload.Workload.lost_if_noticed_s`),
so it can run the search with that knowledge and show how much lost work any victim rule could
still save on a trace:

- `clairvoyant`: the cost is the true loss alone — the greedy best, decision by decision (not a
  global optimum: a cheap reclaim now can cost more later);
- `clairvoyant-fair`: the fairness policy (`core.fairness`) with the true loss in place of its
  estimate — requeue cost, interruption history and the minimum-runtime shield kept — which
  separates what fairness costs from what the plane's blindness costs.

Both come into being unbound (`loss_s` None); `sim.runner.Simulation` binds them to its own
workloads (in its `sim.shell.Shell`). They are in `sim`, not `core.policies`, so that the server
can never be configured with one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Final

from lowcostgpu.core.fairness import FAIR_LEAST_WORK_LOST, FairLeastWorkLost
from lowcostgpu.core.host_state import HostState
from lowcostgpu.core.victim_policy import NO_UNPROTECTED_SET
from lowcostgpu.domain.capacity import Allocation, Timestamp
from lowcostgpu.domain.errors import InvalidRequest

# (subject id, now) -> seconds of work one GPU of that subject's workload would lose at a notice.
LossOf = Callable[[str, Timestamp], int]

CLAIRVOYANT: Final = "clairvoyant"
CLAIRVOYANT_FAIR: Final = "clairvoyant-fair"
REFERENCE_NAMES: Final = (CLAIRVOYANT, CLAIRVOYANT_FAIR)


@dataclass(frozen=True, slots=True)
class Clairvoyant:
    """The true loss (plus, with `fair`, the fairness policy's requeue and history terms)."""

    loss_s: LossOf | None = None
    fair: FairLeastWorkLost | None = None
    name: str = CLAIRVOYANT

    def bound(self, loss_s: LossOf) -> Clairvoyant:
        return replace(self, loss_s=loss_s)

    def true_loss_gpu_s(self, alloc: Allocation, now: Timestamp) -> int:
        if self.loss_s is None:
            raise InvalidRequest(f"{self.name} only runs in the simulator, which knows the loss")
        return alloc.priced_gpus * self.loss_s(alloc.subject_id, now)

    def cost(self, alloc: Allocation, now: Timestamp) -> int:
        loss = self.true_loss_gpu_s(alloc, now)
        if self.fair is None:
            return loss
        return self.fair.parts_with_loss(alloc, now, loss).total

    def describe(self, cost: int) -> str:
        return f"{cost} GPU-s of true loss" + (" + requeue + history" if self.fair else "")

    def shields(self, alloc: Allocation, now: Timestamp, min_runtime_s: int) -> bool:
        return self.fair is not None and self.fair.shields(alloc, now, min_runtime_s)

    def explain_victim(self, alloc: Allocation, now: Timestamp) -> str:
        return f"{alloc.subject_id} truly loses {self.true_loss_gpu_s(alloc, now)} GPU-s"

    def lower_bound(
        self, host: HostState, deficit: int, now: Timestamp, started_by: Timestamp
    ) -> int:
        """A true loss can be 0 (a job that saves at the notice): only the count is a bound."""
        startable = sum(1 for _, start in host.gpu_marks if start <= started_by)
        return NO_UNPROTECTED_SET if startable < deficit else 0

    def order_bound(self, host: HostState, deficit: int, now: Timestamp) -> int:
        return 0


def reference_policy(name: str) -> Clairvoyant | None:
    """The named yardstick, unbound; None for any other name."""
    if name == CLAIRVOYANT:
        return Clairvoyant()
    if name == CLAIRVOYANT_FAIR:
        return Clairvoyant(fair=FAIR_LEAST_WORK_LOST, name=CLAIRVOYANT_FAIR)
    return None
