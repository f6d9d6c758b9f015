"""The metering pass: usage cut from the live state when an interval closes, rated and written.

`app.meter` knows which spans may still owe usage; this is the pass that bills them, and the
one part of the plane that writes to the store without holding the decision lock for it: the
cut is taken under the lock, then rated, charged and written in chunks outside it
(`app.meter.pass_commits`), so that a pass of 10,000 running instances does not stop launches.
The watermarks of what landed go back into the live state's meter under the lock, unless the
live state was loaded again meanwhile (that load read them from the store).
"""

from __future__ import annotations

import time
from functools import partial

from lowcostgpu.app import billing
from lowcostgpu.app.context import PlaneContext
from lowcostgpu.app.decider import Decider
from lowcostgpu.app.meter import PASS_PAUSE_S, pass_commits
from lowcostgpu.core.metering import MeterKey, UsageRecord
from lowcostgpu.domain.capacity import Timestamp
from lowcostgpu.ports.store import EventRecord
from lowcostgpu.ports.store_records import LedgerEntry


class MeteringPass:
    """A pass over the live state `decider` keeps, when one is due."""

    def __init__(self, context: PlaneContext, decider: Decider) -> None:
        self._context = context
        self._decider = decider

    def meter_if_due(self) -> None:
        """A metering pass when an interval has closed: what may owe usage is cut from the live
        state under the decision lock, then rated and written without it, in chunks (`app.meter`
        `pass_commits`), so that decisions go on meanwhile."""
        ctx, decider = self._context, self._decider
        with decider.lock:
            meter, live, now = decider.meter, decider.live, ctx.clock.now()
            if ctx.standby or live is None or meter is None or not meter.due(now):
                return
            cut = meter.cut(live.state)
        moved: dict[MeterKey, Timestamp] = {}
        charge = partial(self._charges, now=now)
        interval_s = meter.interval_s
        try:
            for n, commit in enumerate(pass_commits(cut, now, interval_s, charge)):
                if n:
                    time.sleep(PASS_PAUSE_S)  # let requests run between the chunks
                ctx.store.commit(commit)
                moved.update(commit.metered_through)
        except BaseException:
            with decider.lock:  # the chunks that landed are not metered again by the retry
                meter.through.update(moved)
            raise
        with decider.lock:
            live = decider.live
            if decider.meter is meter and live is not None:
                meter.passed(live.state, moved, now)

    def _charges(
        self, records: list[UsageRecord], *, now: Timestamp
    ) -> tuple[list[LedgerEntry], list[EventRecord]]:
        """The ledger entries and BalanceLow events of records, from the balances now (only
        the accounts they name are read)."""
        ctx = self._context
        balances = ctx.store.balances_of({r.account_id for r in records})
        return billing.charges(records, ctx.catalog, balances, ctx.config.low_balance_usd, now)
