"""A typed client of the lowcostgpu HTTP API (httpx), used by the CLI for everything it asks.

HTTP errors come back as the control plane's own error tree (`domain.errors`), rebuilt by
`client.http_errors`: callers branch on `NotFound`, `PaymentRequired`, … as they would
in-process. A server that cannot be reached is `Unavailable` with one line saying how to start
one. The answers' shapes are in `client.records`; the cluster and volume endpoints are
sub-clients on the same connection (`client.clusters`, `client.volumes`); a long follower's
reconnecting is `client.reconnecting`.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, cast

import httpx

from lowcostgpu.client.http_errors import FOLLOW_RETRY_MAX_S, START_HINT, ServerDown, error_from
from lowcostgpu.client.records import Account, CreatedAccount, Event, Instance, Json
from lowcostgpu.domain import errors

NEXT_CURSOR = "X-Next-Cursor"  # the header of a list page that is not the last
PAGE_MAX = 500  # the most instances `GET /v1/instances` answers per page


def _page_size(limit: int | None) -> int:
    if limit is None:
        return PAGE_MAX
    if limit < 1:
        raise errors.InvalidRequest(f"limit {limit} is not a positive number of instances")
    return min(limit, PAGE_MAX)


class Client:
    def __init__(self, url: str, api_key: str | None = None, *, timeout_s: float = 30.0) -> None:
        self.url = url.rstrip("/")
        headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout_s)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # Plumbing -----------------------------------------------------------------------------------

    def _call(self, method: str, path: str, **kw: Any) -> Any:
        response = self._request(method, path, **kw)
        if not response.content:
            return None
        if response.headers.get("content-type", "").startswith("application/json"):
            return response.json()
        return response.text

    def _request(self, method: str, path: str, **kw: Any) -> httpx.Response:
        """The response (headers too), or the error it stands for."""
        try:
            response = self._http.request(method, path, **kw)
        except httpx.TransportError as exc:
            raise self._unreachable(exc) from None
        if response.status_code >= 400:
            raise error_from(response)
        return response

    def _unreachable(self, exc: Exception) -> errors.Unavailable:
        return ServerDown(
            f"no lowcostgpu server answers at {self.url} ({type(exc).__name__})", hint=START_HINT
        )

    # Service ------------------------------------------------------------------------------------

    def health(self) -> Json:
        return cast(Json, self._call("GET", "/healthz"))

    def metrics(self) -> str:
        return cast(str, self._call("GET", "/metrics"))

    # Instances ----------------------------------------------------------------------------------

    def launch(self, **body: Any) -> Instance:
        """Fields as `POST /v1/instances`: gpu, type, gpus, region, template, command, env,
        volume, auto_requeue, grace_period_s."""
        return cast(Instance, self._call("POST", "/v1/instances", json=body))

    def instances(
        self,
        *,
        include_deleted: bool = False,
        statuses: Sequence[str] = (),
        limit: int | None = None,
    ) -> list[Instance]:
        """The account's instances, newest first: every page (following `X-Next-Cursor` until
        the last), or the newest `limit`. One request per `PAGE_MAX` instances."""
        found: list[Instance] = []
        for page in self.instance_pages(
            include_deleted=include_deleted, statuses=statuses, page_size=_page_size(limit)
        ):
            found += page
            if limit is not None and len(found) >= limit:
                return found[:limit]
        return found

    def instance_pages(
        self,
        *,
        include_deleted: bool = False,
        statuses: Sequence[str] = (),
        page_size: int = PAGE_MAX,
    ) -> Iterator[list[Instance]]:
        """`GET /v1/instances` a page at a time, until a page without `X-Next-Cursor`."""
        params: dict[str, Any] = {"limit": page_size}
        if include_deleted:
            params["all"] = "true"
        if statuses:
            params["status"] = ",".join(statuses)
        while True:
            response = self._request("GET", "/v1/instances", params=params)
            yield cast(list[Instance], response.json())
            cursor = response.headers.get(NEXT_CURSOR)
            if not cursor:
                return
            params = {**params, "cursor": cursor}

    def instances_with_prefix(self, prefix: str, limit: int = 3) -> list[Instance]:
        """The account's instances whose id starts with `prefix`, by id: one request."""
        params = {"id_prefix": prefix, "limit": limit}
        return cast(list[Instance], self._call("GET", "/v1/instances", params=params))

    def instance(self, instance_id: str) -> Instance:
        return cast(Instance, self._call("GET", f"/v1/instances/{instance_id}"))

    def stop(self, instance_id: str) -> Instance:
        return cast(Instance, self._call("POST", f"/v1/instances/{instance_id}/stop"))

    def resume(self, instance_id: str) -> Instance:
        return cast(Instance, self._call("POST", f"/v1/instances/{instance_id}/resume"))

    def delete(self, instance_id: str) -> Instance:
        return cast(Instance, self._call("DELETE", f"/v1/instances/{instance_id}"))

    def usage(self, instance_id: str) -> Json:
        return cast(Json, self._call("GET", f"/v1/instances/{instance_id}/usage"))

    def timeline(self, instance_id: str, after: int = 0) -> list[Event]:
        path = f"/v1/instances/{instance_id}/events"
        return cast(list[Event], self._call("GET", path, params={"after": after}))

    def events(
        self,
        after: int = 0,
        limit: int = 200,
        *,
        object: str | None = None,
        reason: str | None = None,
        since: int | None = None,
        wait_s: float = 0,
        newest: bool = False,
    ) -> list[Event]:
        """The account's events after seq `after`; with `wait_s`, waits for the first one; with
        `newest`, the last `limit` of them."""
        params: dict[str, Any] = {"after": after, "limit": limit, "wait_s": wait_s}
        if newest:
            params["newest"] = "true"
        wanted = {"object": object, "reason": reason, "since": since}
        params.update({k: v for k, v in wanted.items() if v is not None})
        return cast(list[Event], self._call("GET", "/v1/events", params=params))

    def follow_events(self, after: int = 0, wait_s: float = 25, **filters: Any) -> Iterator[Event]:
        """Every event after `after` as it is committed, forever: long-polls from the last seq.

        A poll refused because too many wait already (429) is asked again when the server says
        (`retry_after_s`, at most `FOLLOW_RETRY_MAX_S`): a follower outlasts a busy moment."""
        while True:
            try:
                found = self.events(after, 1000, wait_s=wait_s, **filters)
            except errors.Unavailable as exc:
                retry_s = exc.details.get("retry_after_s")
                if not isinstance(retry_s, int | float):
                    raise
                time.sleep(min(max(float(retry_s), 0.1), FOLLOW_RETRY_MAX_S))
                continue
            for event in found:
                after = max(after, event["seq"] or 0)
                yield event

    def create_webhook(self, url: str, reasons: list[str] | None = None) -> Json:
        """A new endpoint; the answer's `secret` is shown this once."""
        body = {"url": url, "reasons": reasons or []}
        return cast(Json, self._call("POST", "/v1/webhooks", json=body))

    def webhooks(self) -> list[Json]:
        return cast(list[Json], self._call("GET", "/v1/webhooks"))

    def webhook_action(self, webhook_id: str, action: str) -> Json:
        """`enable` or `test` (POST), `rm` (DELETE)."""
        if action == "rm":
            return cast(Json, self._call("DELETE", f"/v1/webhooks/{webhook_id}"))
        return cast(Json, self._call("POST", f"/v1/webhooks/{webhook_id}/{action}"))

    def deliveries(self, webhook_id: str) -> list[Json]:
        return cast(list[Json], self._call("GET", f"/v1/webhooks/{webhook_id}/deliveries"))

    def replay(self, webhook_id: str, delivery_id: str) -> Json:
        path = f"/v1/webhooks/{webhook_id}/deliveries/{delivery_id}/replay"
        return cast(Json, self._call("POST", path))

    def logs(
        self,
        instance_id: str,
        tail_bytes: int = 65536,
        *,
        run: int | None = None,
        previous: bool = False,
    ) -> str:
        """The latest run's log, or that of run `run` (its restart count, 0 = the first), or of
        the run before the latest (`previous`)."""
        params: dict[str, Any] = {"tail_bytes": tail_bytes}
        if run is not None:
            params["run"] = run
        if previous:
            params["previous"] = "true"
        text = self._call("GET", f"/v1/instances/{instance_id}/logs", params=params)
        return cast(str, text or "")

    def follow_logs(self, instance_id: str, tail_bytes: int = 65536) -> Iterator[str]:
        params: Mapping[str, Any] = {"tail_bytes": tail_bytes, "follow": "true"}
        path = f"/v1/instances/{instance_id}/logs"
        try:
            with self._http.stream("GET", path, params=params, timeout=None) as response:
                if response.status_code >= 400:
                    response.read()
                    raise error_from(response)
                yield from response.iter_text()
        except httpx.TransportError as exc:
            raise self._unreachable(exc) from None

    # Prices, fleet, billing ---------------------------------------------------------------------

    def prices(self) -> Json:
        """Public: answered with or without a key."""
        return cast(Json, self._call("GET", "/v1/prices"))

    def fleet(self) -> Json:
        return cast(Json, self._call("GET", "/v1/fleet"))

    def bill(self, start: int = 0, end: int | None = None) -> Json:
        params: dict[str, int] = {"start": start}
        if end is not None:
            params["end"] = end
        return cast(Json, self._call("GET", "/v1/billing", params=params))

    def usage_records(self) -> list[Json]:
        return cast(list[Json], self._call("GET", "/v1/billing/usage"))

    def balance(self, ledger: int = 20) -> Json:
        return cast(Json, self._call("GET", "/v1/billing/balance", params={"ledger": ledger}))

    def account(self) -> Account:
        return cast(Account, self._call("GET", "/v1/account"))

    # Admin --------------------------------------------------------------------------------------

    def create_account(self, name: str) -> CreatedAccount:
        return cast(CreatedAccount, self._call("POST", "/v1/accounts", json={"name": name}))

    def accounts(self) -> list[Account]:
        return cast(list[Account], self._call("GET", "/v1/accounts"))

    def create_key(self, account_id: str) -> Json:
        return cast(Json, self._call("POST", f"/v1/accounts/{account_id}/keys"))

    def topup(self, account_id: str, amount: str, reference: str | None = None) -> Account:
        body = {"amount": amount, "reference": reference}
        return cast(Account, self._call("POST", f"/v1/accounts/{account_id}/topup", json=body))
