"""How much of a policy's lost work was avoidable at the moment it was lost.

Lost work differs little between victim rules on a trace where most reclaims leave no real
choice (one host, one set of victims that frees the GPUs). To tell that apart from a weak rule,
each reclaim is measured twice: what the policy's victims truly lose, and what the victims the
clairvoyant yardstick (`sim.clairvoyant`) would have chosen at the same moment, on the same
state, would have lost. The engine is pure, so the second choice is a dry run of the same
`engine.launch` that is then thrown away.

The comparison is per decision, on the policy's own trajectory: it says how much a better choice
*then* would have saved, not what another policy would have lost over the whole run (its
reclaims would have come at other times). The clairvoyant choice still ranks fresh starts first
as every policy does, so it is the least loss among the sets the engine would weigh first.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from lowcostgpu.core import engine
from lowcostgpu.core.effects import SignalWorkload
from lowcostgpu.core.engine import EngineState, EngineStep, LaunchSpec
from lowcostgpu.core.scheduler import SchedulerConfig
from lowcostgpu.domain.errors import InsufficientCapacity
from lowcostgpu.sim.clairvoyant import Clairvoyant

# (subject id, now) -> seconds of work one GPU of its workload would lose at a notice now.
LossOf = Callable[[str, int], int]


@dataclass(slots=True)
class ReclaimLosses:
    """Per reclaim that noticed victims: (their true loss, the clairvoyant choice's), GPU-s."""

    pairs: list[tuple[int, int]] = field(default_factory=list)

    def measure(
        self,
        before: EngineState,
        spec: LaunchSpec,
        step: EngineStep,
        now: int,
        config: SchedulerConfig,
        loss_s: LossOf,
        gpus_of: Callable[[str], int],
    ) -> None:
        """Record the launch `step` taken on `before`, if it reclaimed anything."""
        victims = _victims(step)
        if not victims:
            return
        actual = sum(loss_s(v, now) * gpus_of(v) for v in victims)
        # The dry run wants the victims only: no preemption-risk replay (its dearest part).
        yardstick = replace(config, policy=Clairvoyant().bound(loss_s), risk_window_s=0)
        try:
            choice = engine.launch(before, spec, now, yardstick)
        except InsufficientCapacity:  # pragma: no cover - it sees every set the policy sees
            best = actual
        else:
            best = sum(loss_s(v, now) * gpus_of(v) for v in _victims(choice))
        self.pairs.append((actual, min(actual, best)))

    @property
    def actual_gpu_s(self) -> int:
        return sum(actual for actual, _ in self.pairs)

    @property
    def clairvoyant_gpu_s(self) -> int:
        return sum(best for _, best in self.pairs)


def _victims(step: EngineStep) -> list[str]:
    """A launch signals only the victims it reclaims."""
    return [e.subject_id for e in step.effects if isinstance(e, SignalWorkload)]
