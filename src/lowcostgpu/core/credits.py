"""Credit for lost work: the GPU-time a reclaim cost a customer who reported checkpoints.

An operator's option (`lowcostgpu serve --credit-lost-work`, docs/billing.md): at a reclaim the
customer is credited what the reclaim destroyed. It tells customers "report your checkpoints and
we refund any work we cost you", and it makes the operator pay for a bad victim choice. The rule
lives here once, pure, so that the server's ledger (`app.billing`) and the simulator's figures
(`sim.metrics`) can never disagree:

- Only a reclaim: the `Preempted` notice of an *instance* (a user's stop loses nothing it did not
  ask for; a cluster node never reports checkpoints to the plane, so the rule gives it nothing).
- The GPU-seconds since the instance's last reported checkpoint at the notice (T+0): the
  `lost_gpu_s` the victim policy charged for it (`core.drain.Reclaimed`, in the event's data), so
  the credit is the very figure the reclaim was decided on, not a second estimate.
- Never more than the billed run: GPUs × [the run's start, the notice). A checkpoint from an
  earlier run counts from this run's start; the wait for victims before a start is not billed,
  so it is not credited either; a reclaim before the workload started credits nothing.
- Nothing for an instance that never reported a checkpoint: the policy estimates its loss, but
  a refund must rest on what the customer told us, or hiding checkpoints would pay twice.
- Priced at the rate the run was billed at (`core.rating.gpu_price`: its GPU type's
  interruptible rate), exact (`core.rating.to_money`).

One credit per (instance, allocation): `key` makes the ledger entry idempotent.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction

from lowcostgpu.core.effects import Effect, EmitEvent
from lowcostgpu.core.instance_state import InstanceState, Run
from lowcostgpu.core.rating import gpu_price
from lowcostgpu.domain.capacity import CapacityClass, Timestamp
from lowcostgpu.domain.catalog import Catalog
from lowcostgpu.domain.events import Reason
from lowcostgpu.domain.money import SECONDS_PER_HOUR


def lost_work_credit_gpu_s(*, lost_gpu_s: int, gpus: int, billed_run_s: int, reported: bool) -> int:
    """The rule: the reclaim's lost work, capped by the billed run; 0 without any report."""
    if not reported:
        return 0
    return max(0, min(lost_gpu_s, gpus * max(0, billed_run_s)))


@dataclass(frozen=True, slots=True)
class LostWorkCredit:
    """What one reclaim of one instance is credited (`gpu_s` may be 0: nothing to credit)."""

    instance_id: str
    account_id: str
    allocation_id: str
    gpu_type: str
    capacity_class: CapacityClass
    gpus: int
    notice_at: Timestamp
    gpu_s: int
    since_checkpoint: bool  # False: the checkpoint predates the run, credited from its start

    @property
    def key(self) -> str:
        """The ledger key: one credit per instance and allocation, however often replayed."""
        return f"credit:lost-work:{self.instance_id}:{self.allocation_id}"

    def exact_usd(self, catalog: Catalog) -> Fraction:
        price = gpu_price(catalog, self.gpu_type, self.capacity_class)
        return self.gpu_s * Fraction(price.amount) / SECONDS_PER_HOUR

    @property
    def memo(self) -> str:
        """The reason on the bill: whose reclaim, how many GPUs for how long, since when."""
        hours, rest = divmod(self.gpu_s // max(1, self.gpus), 3600)
        minutes, seconds = divmod(rest, 60)
        since = "since last checkpoint" if self.since_checkpoint else "since the run's start"
        return (
            f"credit: work lost at reclaim of {self.instance_id} "
            f"({self.gpus} GPU × {hours}:{minutes:02d}:{seconds:02d} {since})"
        )


def reclaim_credit(notice: EmitEvent, inst: InstanceState) -> LostWorkCredit | None:
    """The credit of a `Preempted` notice of `inst` (its state after the reclaim's step), or
    None when it is no reclaim of an instance or its run was not billed (not started yet)."""
    if notice.object_kind != "instance" or notice.reason is not Reason.PREEMPTED:
        return None
    run = _run_closed_at(inst, notice.at)
    if run is None:
        return None
    reported = inst.last_checkpoint_at is not None
    gpu_s = lost_work_credit_gpu_s(
        lost_gpu_s=int(notice.data.get("lost_gpu_s", 0)),
        gpus=inst.gpus,
        billed_run_s=notice.at - run.started_at,
        reported=reported,
    )
    checkpoint = inst.last_checkpoint_at
    return LostWorkCredit(
        instance_id=inst.id,
        account_id=inst.account_id,
        allocation_id=run.allocation_id,
        gpu_type=inst.pool.gpu_type,
        capacity_class=inst.capacity_class,
        gpus=inst.gpus,
        notice_at=notice.at,
        gpu_s=gpu_s,
        since_checkpoint=checkpoint is not None and checkpoint > run.started_at,
    )


def _run_closed_at(inst: InstanceState, notice_at: Timestamp) -> Run | None:
    """The run the notice ended (billing stops at T+0, `core.lifecycle._begin_drain`): the last
    one, closed then, of the allocation the instance still holds (none when it was reclaimed
    before it started, unless the drain has ended and let it go)."""
    if not inst.runs:
        return None
    run = inst.runs[-1]
    held = inst.allocation_id is None or inst.allocation_id == run.allocation_id
    return run if held and run.billed_until == notice_at else None


def reclaim_credits(
    effects: Iterable[Effect], instances: Mapping[str, InstanceState]
) -> list[LostWorkCredit]:
    """The credits (more than 0 GPU-s) of a step's reclaims, one per key; `instances`: the
    step's state after. O(effects)."""
    credits: dict[str, LostWorkCredit] = {}
    for effect in effects:
        if not isinstance(effect, EmitEvent) or effect.reason is not Reason.PREEMPTED:
            continue
        inst = instances.get(effect.object_id) if effect.object_kind == "instance" else None
        credit = None if inst is None else reclaim_credit(effect, inst)
        if credit is not None and credit.gpu_s > 0:
            credits.setdefault(credit.key, credit)
    return list(credits.values())
