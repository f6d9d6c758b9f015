"""Client of the instance metadata endpoint (stdlib only).

Reporting is best effort by design: a lost report costs the scheduler a little precision, while a
crash of the training loop costs the user their job. So every call has a short timeout, never
raises on network or server errors, and logs a warning instead. Without a base URL (a local run)
every call is a no-op.
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from typing import Any

from lowcostgpu.sdk.env import WorkloadEnv

log = logging.getLogger("lowcostgpu.sdk")

DEFAULT_TIMEOUT_S = 2.0


class MetadataClient:
    """Talks to `{base_url}/interruption|checkpoint|complete|fleet` with a bearer token."""

    def __init__(
        self, base_url: str | None, token: str | None, timeout_s: float = DEFAULT_TIMEOUT_S
    ) -> None:
        self.base_url = base_url.rstrip("/") if base_url else None
        self._token = token
        self.timeout_s = timeout_s
        # Metadata endpoints are host-local: never send them (or the token) through a proxy.
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        self._healthy = True

    @classmethod
    def from_env(cls, env: WorkloadEnv) -> MetadataClient:
        return cls(env.metadata_url, env.token)

    @property
    def enabled(self) -> bool:
        return self.base_url is not None

    def report_checkpoint(
        self,
        step: int,
        *,
        save_s: float | None = None,
        saves_on_notice: bool | None = None,
        **extra: Any,
    ) -> bool:
        """Tell the control plane a checkpoint of `step` is durable; True if it was accepted.

        `save_s`: the seconds the save took; `saves_on_notice`: this workload saves when a notice
        comes (the plane then charges a reclaim its save time, not the work since this
        checkpoint; it needs `save_s` with it). Each is sent only when given."""
        body: dict[str, Any] = {"step": int(step), **extra}
        if save_s is not None:
            body["save_s"] = float(save_s)
        if saves_on_notice is not None:
            body["saves_on_notice"] = bool(saves_on_notice)
        status, _ = self._call("POST", "/checkpoint", body)
        return status is not None and 200 <= status < 300

    def report_complete(self, step: int | None = None) -> bool:
        """Tell the control plane the run finished on purpose (a success, not an interruption)."""
        body: dict[str, Any] = {} if step is None else {"step": int(step)}
        status, _ = self._call("POST", "/complete", body)
        return status is not None and 200 <= status < 300

    def interruption(self) -> dict[str, Any] | None:
        """The interruption notice (`{"action": "stop", ...}`), the advice that this instance
        is among the next victims (`{"action": "none", "risk": "next", "risk_since": ...}`:
        save a checkpoint early, `StopNotice.note_risk`), or None (neither, or unknown). Only
        `action == "stop"` is a notice; a server without warnings never sends `risk`."""
        status, payload = self._call("GET", "/interruption", None, quiet_statuses=(404,))
        if status == 200 and isinstance(payload, dict):
            return payload
        return None

    def fleet(self) -> dict[str, Any] | None:
        """Fleet interruption statistics, for the adaptive checkpoint interval; None if unknown."""
        status, payload = self._call("GET", "/fleet", None)
        if status == 200 and isinstance(payload, dict):
            return payload
        return None

    def _call(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None,
        quiet_statuses: tuple[int, ...] = (),
    ) -> tuple[int | None, Any]:
        """(status, decoded JSON or None); status None when the endpoint could not be reached."""
        if self.base_url is None:
            return None, None
        request = self._request(method, path, body)
        try:
            with self._opener.open(request, timeout=self.timeout_s) as response:
                status, raw = response.status, response.read()
        except urllib.error.HTTPError as error:
            if error.code not in quiet_statuses:
                self._warn(f"{method} {path} answered HTTP {error.code}")
            return error.code, None
        except (OSError, ValueError) as error:  # URLError, timeouts, refused, bad URL
            self._warn(f"{method} {path} failed: {error}")
            return None, None
        self._healthy = True
        return status, _decode(raw)

    def _request(
        self, method: str, path: str, body: dict[str, Any] | None
    ) -> urllib.request.Request:
        headers = {"Accept": "application/json"}
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        return urllib.request.Request(
            f"{self.base_url}{path}", data=data, headers=headers, method=method
        )

    def _warn(self, message: str) -> None:
        """Warn on the first failure after a success; repeat failures go to debug, not spam."""
        level = logging.WARNING if self._healthy else logging.DEBUG
        log.log(level, "lowcostgpu metadata endpoint: %s (training continues)", message)
        self._healthy = False


def _decode(raw: bytes) -> Any:
    if not raw:
        return None
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        log.debug("lowcostgpu metadata endpoint: answer is not JSON: %r", raw[:200])
        return None
