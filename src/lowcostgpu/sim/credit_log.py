"""What `--credit-lost-work` would credit in a simulated run, and what those victims truly lost.

The credit follows the server's rule (`core.credits.drain_credit`, on the checkpoints the engine
saw reported) at the end of each drained run. Its true counterpart is what the victim's workload
really had unsaved: taken at the notice (before the notice is carried out, when the workload
still runs as it did) and kept until the run ends, so that docs/simulation.md can compare what
the operator pays back with what the reclaim destroyed.
"""

from __future__ import annotations

from collections.abc import Callable

from lowcostgpu.core.credits import LostWorkCredit, drain_credit
from lowcostgpu.core.effects import EmitEvent
from lowcostgpu.core.engine import EngineStep
from lowcostgpu.domain.capacity import Timestamp
from lowcostgpu.domain.events import Reason


class CreditLog:
    def __init__(self) -> None:
        self.credits: list[LostWorkCredit] = []
        self.credited_true_loss_gpu_s = 0
        self._true_loss_at_notice_gpu_s: dict[str, int] = {}  # instance → its drain's true loss

    def saw(self, step: EngineStep, true_loss_gpu_s: Callable[[str, Timestamp], int]) -> None:
        """The step's notices and drained ends; `true_loss_gpu_s(instance id, at)` is what the
        instance's workload would truly lose at a notice at `at`. O(the step's effects)."""
        for effect in step.effects:
            if isinstance(effect, EmitEvent) and effect.object_kind == "instance":
                if effect.reason is Reason.PREEMPTED:
                    lost = true_loss_gpu_s(effect.object_id, effect.at)
                    self._true_loss_at_notice_gpu_s[effect.object_id] = lost
                elif effect.reason is Reason.INTERRUPTED:
                    self._ended(effect, step)

    def _ended(self, ended: EmitEvent, step: EngineStep) -> None:
        lost = self._true_loss_at_notice_gpu_s.pop(ended.object_id, 0)
        credit = drain_credit(ended, step.state.instances[ended.object_id])
        if credit is not None and credit.gpu_s > 0:
            self.credits.append(credit)
            self.credited_true_loss_gpu_s += lost
