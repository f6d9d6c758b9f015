"""One error tree for the whole control plane.

Every error carries a machine `code` (stable, used by the API and the CLI) and a human message that
says what was wrong and what to do about it. Adapters translate their own failures into this tree
at the edge, so callers above never see a driver's or a library's exception.
"""

from __future__ import annotations

from typing import Any, ClassVar


class LowcostgpuError(Exception):
    """Root of every error the control plane raises on purpose."""

    code: ClassVar[str] = "error"

    def __init__(self, message: str, *, hint: str | None = None, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.details: dict[str, Any] = details

    def __str__(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape of an error: a code to branch on, a message to show, details to use."""
        body: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.hint:
            body["hint"] = self.hint
        if self.details:
            body["details"] = self.details
        return body


class InvalidRequest(LowcostgpuError):
    """The request itself is wrong; repeating it unchanged will fail again."""

    code = "invalid_request"


class ConfigError(InvalidRequest):
    """An operator's file (catalog, fleet) is wrong; `source` and `line` say where."""

    code = "invalid_config"


class NotFound(LowcostgpuError):
    code = "not_found"


class Conflict(LowcostgpuError):
    """The request contradicts the current state (or a concurrent write won)."""

    code = "conflict"


class IllegalTransition(Conflict):
    """A status change that the transition table does not allow."""

    code = "illegal_transition"


class StaleWrite(Conflict):
    """An expected version did not match: someone else wrote first; re-read and retry."""

    code = "stale_write"


class InsufficientCapacity(LowcostgpuError):
    """No capacity now, even after reclaiming every preemptible allocation that may be reclaimed."""

    code = "insufficient_capacity"


class PaymentRequired(LowcostgpuError):
    """The account's prepaid balance cannot cover a new launch."""

    code = "payment_required"


class Unauthenticated(LowcostgpuError):
    """No credentials, or credentials that do not check out."""

    code = "unauthenticated"


class Forbidden(LowcostgpuError):
    """Valid credentials that may not do this (an account key on an admin action, say)."""

    code = "forbidden"


class Unavailable(LowcostgpuError):
    """The service cannot do this now (a standby server, a store that cannot be reached)."""

    code = "unavailable"
