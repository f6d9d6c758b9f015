"""Charging metered usage to prepaid balances, and what the billing endpoints show.

Each usage record is charged by a ledger entry keyed by the record's own key, written in the same
commit as the record: a record is charged exactly once, however often a tick is replayed after a
crash. The charge is the record's exact amount (`core.rating.rate`: exact when its decimal
expansion ends, else to 20 places — an error below 1e-20 $ per record).

`BalanceLow` fires once per crossing: when an account's balance goes from at or above the
threshold to below it in one commit. A top-up back above the threshold re-arms it.

With the operator's `--credit-lost-work` (`PlaneConfig.credit_lost_work`), a reclaim credits the
work it destroyed (the rule: `core.credits`). The credit is decided when the drained run ends —
its workload exited after the notice or was killed at the deadline — from the checkpoints the
customer reported until then: its ledger entry goes into the very commit that writes the
`Interrupted` event and the interrupted instance (`with_lost_work_credits`), keyed by instance
and allocation. So a crash before that commit loses the run's end and its credit together (the
exit is reported again, the decision taken again), a crash after it keeps both, and a replayed
commit inserts nothing twice.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from decimal import Decimal

from lowcostgpu.core.credits import LostWorkCredit, drain_credits
from lowcostgpu.core.engine import EngineStep
from lowcostgpu.core.metering import UsageRecord
from lowcostgpu.core.rating import rate, to_money
from lowcostgpu.domain.capacity import Timestamp
from lowcostgpu.domain.catalog import Catalog
from lowcostgpu.domain.events import Reason, event_type_of
from lowcostgpu.ports.store import EventRecord
from lowcostgpu.ports.store_records import Commit, LedgerEntry

DEFAULT_LOW_BALANCE_USD = Decimal("1.00")


def charge_key(record: UsageRecord) -> str:
    return f"charge:{record.subject_id}:{record.kind}:{record.interval_start}"


def charges(
    records: Sequence[UsageRecord],
    catalog: Catalog,
    balances: Mapping[str, Decimal],
    threshold: Decimal,
    now: Timestamp,
) -> tuple[list[LedgerEntry], list[EventRecord]]:
    """The ledger entries for `records`, and a `BalanceLow` event for each account that crosses."""
    entries: list[LedgerEntry] = []
    spent: dict[str, Decimal] = defaultdict(Decimal)
    for r in records:
        amount = rate(r, catalog).amount
        spent[r.account_id] += amount
        memo = f"{r.kind} {r.resource} [{r.interval_start}, {r.interval_end})"
        entries.append(LedgerEntry(charge_key(r), r.account_id, now, "charge", -amount, memo))
    events = []
    for account, amount in sorted(spent.items()):
        before = balances.get(account, Decimal(0))
        after = before - amount
        if before >= threshold > after:
            events.append(_balance_low(account, after, threshold, now))
    return entries, events


def _balance_low(account: str, balance: Decimal, threshold: Decimal, now: Timestamp) -> EventRecord:
    return EventRecord(
        key=f"balance-low:{account}:{now}",
        at=now,
        account_id=account,
        object_kind="account",
        object_id=account,
        type=event_type_of(Reason.BALANCE_LOW),
        reason=Reason.BALANCE_LOW,
        message=(
            f"balance ${balance:.2f} is below ${threshold:.2f}: top up to keep launching "
            "(running work and volumes are kept)"
        ),
        data={"balance": f"{balance:f}", "threshold": f"{threshold:f}"},
    )


def credit_entries(credits: Iterable[LostWorkCredit], catalog: Catalog) -> list[LedgerEntry]:
    """One `credit` ledger entry per lost-work credit: positive, exact, dated when it was
    decided (the drained run's end: a balance read before then never included it)."""
    return [
        LedgerEntry(c.key, c.account_id, c.decided_at, "credit", credit_amount(c, catalog), c.memo)
        for c in credits
    ]


def credit_amount(credit: LostWorkCredit, catalog: Catalog) -> Decimal:
    return to_money(credit.exact_usd(catalog)).amount


def with_lost_work_credits(commit: Commit, step: EngineStep, catalog: Catalog) -> Commit:
    """`commit` (the decision's) with the credits of the drained runs its step ended."""
    credits = drain_credits(step.effects, step.state.instances)
    if not credits:
        return commit
    return replace(commit, ledger=[*commit.ledger, *credit_entries(credits, catalog)])
