"""A typed client of the lowcostgpu HTTP API (httpx), used by the CLI for everything it asks.

HTTP errors come back as the control plane's own error tree (`domain.errors`), rebuilt from the
JSON body's `code`, `message` and `hint`: callers branch on `NotFound`, `PaymentRequired`, … as
they would in-process. A server that cannot be reached is `Unavailable` with one line saying how
to start one.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NotRequired, TypedDict, TypeVar, cast
from urllib.parse import quote

import httpx

from lowcostgpu.domain import errors

START_HINT = "start one with `make run` or `lowcostgpu serve` (or set LOWCOSTGPU_URL)"
NEXT_CURSOR = "X-Next-Cursor"  # the header of a list page that is not the last
PAGE_MAX = 500  # the most instances `GET /v1/instances` answers per page
FOLLOW_RETRY_MAX_S = 30.0  # the longest a follower waits before asking again after a 429
RECONNECT_GIVE_UP_S = 900.0  # how long a follower keeps asking a server that does not answer
RECONNECT_PAUSES_S = (0.5, 1.0, 2.0, 5.0)  # between its tries (the last one repeats)
T = TypeVar("T")

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


class Queue(TypedDict):
    position: int
    gpus_ahead: int
    eta_at: int | None
    eta_s: int | None


class Instance(TypedDict):
    id: str
    status: str
    gpu: str
    region: str
    gpus: int
    type: str
    price_per_hour: str
    restart_count: int
    interruption_count: int
    last_checkpoint_step: int | None
    host_id: str | None
    gpu_indices: list[int]
    queue_position: int | None
    queue: Queue | None
    notice_at: int | None
    deadline: int | None
    exit_code: int | None
    failure_reason: str | None
    volume: str | None
    created_at: int
    volume_checkpoint_step: NotRequired[int | None]  # the launch answer: what the volume held


class Event(TypedDict):
    seq: int | None
    at: int
    type: str
    reason: str
    object_kind: str
    object_id: str
    message: str
    data: dict[str, Any]


class Account(TypedDict):
    id: str
    name: str
    created_at: int
    balance: str


class CreatedAccount(Account):
    api_key: str


Json = dict[str, Any]


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


class Reconnecting:
    """Runs a call of a long follower (`launch --wait`) until the server answers it: while the
    server is down (`ServerDown`, or a 429 that says when to ask again) it says so once
    (`on_down`), asks again with growing pauses, says when it is back (`on_back`), and gives up
    with one clear error after `give_up_s` without an answer. Other errors pass through."""

    def __init__(
        self,
        on_down: Callable[[errors.Unavailable], None],
        on_back: Callable[[], None],
        give_up_s: float = RECONNECT_GIVE_UP_S,
        *,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.on_down, self.on_back, self.give_up_s = on_down, on_back, give_up_s
        self.sleep, self.clock = sleep, clock

    def call(self, fn: Callable[[], T]) -> T:
        down_since: float | None = None
        tries = 0
        while True:
            try:
                result = fn()
            except errors.Unavailable as exc:
                retry_after = exc.details.get("retry_after_s")
                if isinstance(retry_after, int | float) and not isinstance(exc, ServerDown):
                    self.sleep(min(max(float(retry_after), 0.1), FOLLOW_RETRY_MAX_S))  # busy
                    continue
                if not isinstance(exc, ServerDown):
                    raise
                if down_since is None:
                    down_since = self.clock()
                    self.on_down(exc)
                elif self.clock() - down_since > self.give_up_s:
                    raise self._given_up(exc) from None
                self.sleep(RECONNECT_PAUSES_S[min(tries, len(RECONNECT_PAUSES_S) - 1)])
                tries += 1
                continue
            if down_since is not None:
                self.on_back()
            return result

    def _given_up(self, exc: errors.Unavailable) -> errors.Unavailable:
        return errors.Unavailable(
            f"the server has not answered for {round(self.give_up_s)} s ({exc.message})",
            hint="the instance keeps its place: follow it later with `lowcostgpu show ID`"
            " or `lowcostgpu events --follow`",
        )


class ClusterApi:
    """The cluster endpoints, on the same connection and error translation as `Client`."""

    def __init__(self, client: Client) -> None:
        self._client = client

    def create(self, **body: Any) -> Json:
        return cast(Json, self._client._call("POST", "/v1/clusters", json=body))

    def list(self, id_prefix: str | None = None) -> list[Json]:
        params = {} if id_prefix is None else {"id_prefix": id_prefix}
        return cast(list[Json], self._client._call("GET", "/v1/clusters", params=params))

    def get(self, cluster_id: str) -> Json:
        return cast(Json, self._client._call("GET", f"/v1/clusters/{cluster_id}"))

    def update_target(self, cluster_id: str, desired_preemptible_gpus: int) -> Json:
        body = {"desired_preemptible_gpus": desired_preemptible_gpus}
        return cast(Json, self._client._call("PATCH", f"/v1/clusters/{cluster_id}", json=body))

    def delete(self, cluster_id: str) -> Json:
        return cast(Json, self._client._call("DELETE", f"/v1/clusters/{cluster_id}"))

    def convert_node(self, cluster_id: str, node_id: str, compute_class: str) -> Json:
        path = f"/v1/clusters/{cluster_id}/nodes/{node_id}/convert"
        return cast(Json, self._client._call("POST", path, json={"compute_class": compute_class}))


class Volume(TypedDict):
    name: str
    size_gb: int
    created_at: int
    resized_at: int | None
    in_use_by: list[str]
    checkpoint_step: int | None


class VolumeApi:
    """The volume endpoints, on the same connection and error translation as `Client`."""

    def __init__(self, client: Client) -> None:
        self._client = client

    def list(self) -> list[Volume]:
        return cast(list[Volume], self._client._call("GET", "/v1/volumes"))

    def get(self, name: str) -> Volume:
        return cast(Volume, self._client._call("GET", f"/v1/volumes/{quote(name, safe='')}"))

    def resize(self, name: str, size_gb: int) -> Volume:
        path = f"/v1/volumes/{quote(name, safe='')}"
        return cast(Volume, self._client._call("PATCH", path, json={"size_gb": size_gb}))

    def delete(self, name: str) -> Volume:
        return cast(Volume, self._client._call("DELETE", f"/v1/volumes/{quote(name, safe='')}"))
