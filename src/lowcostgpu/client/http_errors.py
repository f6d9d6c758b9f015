"""What a failed HTTP answer stands for, in the control plane's own error tree (`domain.errors`).

Kept apart from the `Client`'s calls so that every part of the client (the calls, the cluster
and volume sub-clients, the reconnecting follower) reads failures the same way: rebuilt from the
JSON body's `code`, `message` and `hint`, so callers branch on `NotFound`, `PaymentRequired`, …
as they would in-process; a server that is down for now is `ServerDown`, worth asking again.
"""

from __future__ import annotations

from typing import Any

import httpx

from lowcostgpu.domain import errors

START_HINT = "start one with `make run` or `lowcostgpu serve` (or set LOWCOSTGPU_URL)"
FOLLOW_RETRY_MAX_S = 30.0  # the longest a follower waits before asking again after a 429

ERROR_OF_CODE: dict[str, type[errors.LowcostgpuError]] = {
    "invalid_request": errors.InvalidRequest,
    "invalid_config": errors.ConfigError,
    "not_found": errors.NotFound,
    "conflict": errors.Conflict,
    "illegal_transition": errors.IllegalTransition,
    "stale_write": errors.StaleWrite,
    "insufficient_capacity": errors.InsufficientCapacity,
    "payment_required": errors.PaymentRequired,
    "unauthenticated": errors.Unauthenticated,
    "forbidden": errors.Forbidden,
    "unavailable": errors.Unavailable,
    "too_many_waiting": errors.Unavailable,  # for now: its details say when to ask again
}
ERROR_OF_STATUS: dict[int, type[errors.LowcostgpuError]] = {
    400: errors.InvalidRequest,
    401: errors.Unauthenticated,
    402: errors.PaymentRequired,
    403: errors.Forbidden,
    404: errors.NotFound,
    409: errors.Conflict,
    422: errors.InvalidRequest,
}


class ServerDown(errors.Unavailable):
    """The server does not answer for now: the connection is refused or reset, or it answers 5xx
    (a restart, a store that is down). Worth asking again, unlike a 4xx."""


def error_from(response: httpx.Response) -> errors.LowcostgpuError:
    """The domain error a failed response stands for."""
    try:
        body = response.json()
    except ValueError:
        body = {}
    if not isinstance(body, dict):
        body = {}
    code = str(body.get("code", ""))
    kind = ERROR_OF_CODE.get(code) or ERROR_OF_STATUS.get(response.status_code)
    kind = kind or (errors.Unavailable if response.status_code >= 500 else errors.LowcostgpuError)
    if response.status_code >= 500 and kind is errors.Unavailable:
        kind = ServerDown
    message = str(body.get("message") or f"HTTP {response.status_code} from {response.url}")
    raw = body.get("details")
    details: dict[str, Any] = raw if isinstance(raw, dict) else {}
    return kind(message, hint=body.get("hint"), **details)
