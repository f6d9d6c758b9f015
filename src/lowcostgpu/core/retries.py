"""When a failed effect is tried again, and when it is given up: pure rules, no clock.

An effect that fails (a runtime or a volume raised) must never block the outbox for anyone
else: its failure is written on its own entry and the entry is tried again after a backoff that
doubles from `first_backoff_s` up to `max_backoff_s`. The shell reads only the entries that are
due (`Store.pending_outbox(due_at=now)`), so an entry waiting for its retry costs nothing per
tick. What a failure means depends on its kind:

- `permanent`: the runtime refused the effect itself (a command that does not exist): repeating it
  unchanged fails again, so it is given up at once.
- `transient`: anything else that was raised (an `OSError`, a bug's `KeyError`): tried again up to
  `max_attempts` attempts in all, then given up.
- `unavailable`: the runtime could not be reached at all (`Unavailable`). That is no fault of this
  entry, and giving up would fail every customer's start during an outage: retried without limit,
  at the capped backoff.

A given-up start fails its instance with the reason (its GPUs are freed); see
docs/reliability.md for the other kinds of effect.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from lowcostgpu.domain.capacity import Timestamp
from lowcostgpu.domain.errors import InvalidRequest

FailureKind = Literal["permanent", "transient", "unavailable"]
MAX_BACKOFF_EXPONENT = 62  # 2**62 s is past any clock: no larger power is ever computed


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    first_backoff_s: int = 1
    max_backoff_s: int = 60
    max_attempts: int = 8  # 1 + 2 + 4 + 8 + 16 + 32 + 60 s: given up about two minutes in

    def __post_init__(self) -> None:
        if self.first_backoff_s < 1 or self.max_backoff_s < self.first_backoff_s:
            raise InvalidRequest(
                "effect retries: need 1 <= first_backoff_s <= max_backoff_s, got "
                f"{self.first_backoff_s} and {self.max_backoff_s}",
                hint="give the first backoff in whole seconds, at most the largest backoff",
            )
        if self.max_attempts < 1:
            raise InvalidRequest(
                f"effect retries: max_attempts must be at least 1, got {self.max_attempts}",
                hint="1 means an effect that fails is given up at once",
            )


@dataclass(frozen=True, slots=True)
class Verdict:
    """What follows a failed attempt: the entry's attempts so far (this one included), and
    either its next attempt's time or `gave_up`."""

    attempts: int
    next_attempt_at: Timestamp
    gave_up: bool


def backoff_s(attempts: int, policy: RetryPolicy) -> int:
    """The wait after the `attempts`-th failure: first, doubled each time, capped."""
    exponent = min(max(attempts - 1, 0), MAX_BACKOFF_EXPONENT)
    return min(policy.max_backoff_s, policy.first_backoff_s << exponent)


def after_failure(
    attempts_before: int, kind: FailureKind, now: Timestamp, policy: RetryPolicy
) -> Verdict:
    """The verdict on an entry that had failed `attempts_before` times and failed again now.

    A given-up entry still gets a next attempt time (the largest backoff): the shell marks it
    done only after acting on the give-up (failing its instance), so if it dies in between, the
    entry comes back once, later, instead of at once."""
    attempts = attempts_before + 1
    gave_up = kind == "permanent" or (kind == "transient" and attempts >= policy.max_attempts)
    wait_s = policy.max_backoff_s if gave_up else backoff_s(attempts, policy)
    return Verdict(attempts, now + wait_s, gave_up)
