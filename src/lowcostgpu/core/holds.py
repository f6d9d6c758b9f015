"""On-demand holds: freed GPUs wait briefly for an on-demand customer who was just refused.

Without a hold, a refused on-demand request and the preemptible queue race for every GPU that
frees: the queue pass starts queued preemptible work on it in the same step, and the customer's
retry reclaims that work at once. The preemptible job is started only to be killed (it loses its
restart, and after an interruption the minimum runtime shields it, so the retry is refused again
and the on-demand customer waits out the shield). A hold reserves one host of the pool (the one
closest to fitting the refused request, as the queue's head reservation does) against new
preemptible placements for `on_demand_hold_s`; a retry in that time finds the GPUs free, and a
successful on-demand placement in the pool ends the hold. Holds are soft: the shell may forget
them (a restart does), and the worst case is the race above.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from lowcostgpu.domain.capacity import PoolKey, Timestamp


@dataclass(frozen=True, slots=True)
class OnDemandHold:
    """The largest on-demand request refused in `pool` lately, held for until `until`."""

    pool: PoolKey
    gpus: int
    until: Timestamp


def with_refusal(
    holds: Mapping[PoolKey, OnDemandHold],
    pool: PoolKey,
    gpus: int,
    now: Timestamp,
    hold_s: int,
) -> dict[PoolKey, OnDemandHold]:
    """The holds after a refusal: the pool's hold starts or is renewed, for the largest request
    refused while it lasts (the reserved host must fit it). `hold_s` 0 disables holds."""
    result = active(holds, now)
    if hold_s <= 0:
        return result
    old = result.get(pool)
    largest = max(gpus, old.gpus) if old is not None else gpus
    result[pool] = OnDemandHold(pool, largest, now + hold_s)
    return result


def active(holds: Mapping[PoolKey, OnDemandHold], now: Timestamp) -> dict[PoolKey, OnDemandHold]:
    """The holds still running at `now`."""
    return {pool: hold for pool, hold in holds.items() if hold.until > now}
