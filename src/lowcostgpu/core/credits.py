"""Credit for lost work: the GPU-time a reclaim cost a customer who reported checkpoints.

An operator's option (`lowcostgpu serve --credit-lost-work`, docs/billing.md): a reclaim credits
the customer what it destroyed, and no more — "you pay exactly what was used". It tells customers
"report your checkpoints and we refund any work we cost you", and it makes the operator pay for
a bad victim choice. The rule lives here once, pure, so that the server's ledger
(`app.billing`) and the simulator's figures (`sim.runner`, `sim.metrics`) can never disagree.

**When**: at the drained run's end — the `Interrupted` event of an *instance*, when its workload
exited by itself after the `Preempted` notice or was killed at the deadline
(`core.instance_drain._finish_drain`). Only then is it known whether the workload saved in its
grace. A user's stop ends in `Stopped`, never `Interrupted`: it loses nothing the customer did not
ask for. A cluster node never reports checkpoints to the plane and has no `Interrupted` event of an
instance: it is never credited.

**How much** (`lost_work_credit_gpu_s`), from what the customer *reported*, as known at the end:

- nothing when the instance never reported a checkpoint (a refund rests on what the customer
  told us; crediting the victim policy's estimate would make hiding checkpoints pay twice);
- nothing when its last reported checkpoint is at or after the notice: it saved in its grace
  (SIGTERM at T+0, billing stopped then), so the billed run lost nothing;
- otherwise GPUs × (notice − that checkpoint): the billed GPU-time since it;
- never more than the billed run, GPUs × [the run's start, the notice): a checkpoint reported
  before this run started (in an earlier run, or while it was starting) counts from the run's
  start; the wait for victims before a start is not billed, so it is not credited; a run reclaimed
  before its workload started was not billed and is credited nothing.

Priced at the rate the run was billed at (`core.rating.gpu_price`: its GPU type's interruptible
rate), exact (`core.rating.to_money`). One credit per (instance, allocation): `key` makes the
ledger entry idempotent; one allocation is drained at most once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from lowcostgpu.core.effects import Effect, EmitEvent
from lowcostgpu.core.instance_state import InstanceState, Run
from lowcostgpu.core.rating import gpu_price
from lowcostgpu.domain.capacity import CapacityClass, Timestamp
from lowcostgpu.domain.catalog import Catalog
from lowcostgpu.domain.events import Reason
from lowcostgpu.domain.money import SECONDS_PER_HOUR


def lost_work_credit_gpu_s(
    *,
    gpus: int,
    run_started_at: Timestamp,
    notice_at: Timestamp,
    last_checkpoint_at: Timestamp | None,
) -> int:
    """The rule: the billed GPU-time between the last reported checkpoint (or the run's start,
    whichever is later) and the notice; 0 without a report, or with one at or after the notice."""
    if last_checkpoint_at is None or last_checkpoint_at >= notice_at:
        return 0
    since = max(last_checkpoint_at, run_started_at)
    return gpus * max(0, notice_at - since)


@dataclass(frozen=True, slots=True)
class LostWorkCredit:
    """What one drained run of one instance is credited (`gpu_s` may be 0: nothing lost)."""

    instance_id: str
    account_id: str
    allocation_id: str
    gpu_type: str
    capacity_class: CapacityClass
    gpus: int
    notice_at: Timestamp
    decided_at: Timestamp  # the run's end (the ledger entry's date)
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


def drain_credit(ended: EmitEvent, inst: InstanceState) -> LostWorkCredit | None:
    """The credit of a drained run, from its `Interrupted` event (what the instance was at the
    run's end: the drained allocation, the notice, the last reported checkpoint) and `inst` (its
    state after the step, for its runs); None when it is no drain of an instance's billed run."""
    if ended.object_kind != "instance" or ended.reason is not Reason.INTERRUPTED:
        return None
    notice_at = _timestamp(ended.data, "notice_at")
    run = _billed_run(inst, ended.data.get("allocation_id"), notice_at)
    if run is None or notice_at is None:
        return None
    checkpoint = _timestamp(ended.data, "last_checkpoint_at")
    gpu_s = lost_work_credit_gpu_s(
        gpus=inst.total_gpus,
        run_started_at=run.started_at,
        notice_at=notice_at,
        last_checkpoint_at=checkpoint,
    )
    return LostWorkCredit(
        instance_id=inst.id,
        account_id=inst.account_id,
        allocation_id=run.allocation_id,
        gpu_type=inst.pool.gpu_type,
        capacity_class=inst.capacity_class,
        gpus=inst.total_gpus,
        notice_at=notice_at,
        decided_at=ended.at,
        gpu_s=gpu_s,
        since_checkpoint=checkpoint is not None and checkpoint > run.started_at,
    )


def _timestamp(data: Mapping[str, Any], key: str) -> Timestamp | None:
    value = data.get(key)
    return None if value is None else int(value)


def _billed_run(
    inst: InstanceState, allocation_id: object, notice_at: Timestamp | None
) -> Run | None:
    """The drained allocation's run, when it had started: billing closed it at the notice
    (`core.instance_drain._begin_drain`). A new run cannot start in the step that ended this one,
    so it is the last run; none when the workload was reclaimed before it started."""
    if not inst.runs or notice_at is None:
        return None
    run = inst.runs[-1]
    if run.allocation_id != allocation_id or run.billed_until != notice_at:
        return None
    return run


def drain_credits(
    effects: Iterable[Effect], instances: Mapping[str, InstanceState]
) -> list[LostWorkCredit]:
    """The credits (more than 0 GPU-s) of the drained runs a step ended, one per key;
    `instances`: the step's state after. O(effects)."""
    credits: dict[str, LostWorkCredit] = {}
    for effect in effects:
        if not isinstance(effect, EmitEvent) or effect.reason is not Reason.INTERRUPTED:
            continue
        inst = instances.get(effect.object_id) if effect.object_kind == "instance" else None
        credit = None if inst is None else drain_credit(effect, inst)
        if credit is not None and credit.gpu_s > 0:
            credits.setdefault(credit.key, credit)
    return list(credits.values())
