"""The Kubernetes API client: configuration, error translation, retries, version discovery.

The official `kubernetes` client is used in its synchronous form: the control plane's ports
(`Runtime`, the node provider) and the effect runner are synchronous, one decision at a time, so
`kubernetes.aio` would only add an event loop to hand results back to blocking callers. Every call
goes through `Kube.call`, which bounds it by a timeout and turns the client's exceptions into the
domain error tree with a message that says what to do — never a traceback for an operator.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import urllib3
import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException
from kubernetes.config.incluster_config import (
    SERVICE_CERT_FILENAME,
    SERVICE_TOKEN_FILENAME,
    InClusterConfigLoader,
)

from lowcostgpu.domain.errors import (
    ConfigError,
    Conflict,
    Forbidden,
    InvalidRequest,
    LowcostgpuError,
    NotFound,
    Unauthenticated,
    Unavailable,
)

log = logging.getLogger(__name__)
T = TypeVar("T")
DEFAULT_TIMEOUT_S = 10.0
CONFLICT_RETRIES = 5


class TooManyRequests(Unavailable):
    """429: the server (a PodDisruptionBudget, for an eviction) says not now; try again later."""

    code = "too_many_requests"


class Kube:
    """One API server: the typed APIs, raw calls for what the typed client lacks, discovery."""

    def __init__(self, api: client.ApiClient, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.api = api
        self.timeout_s = timeout_s
        self.core = client.CoreV1Api(api)
        self.events = client.EventsV1Api(api)
        self._eviction_version: str | None = None

    @classmethod
    def from_kubeconfig(
        cls, path: str | Path | None = None, *, context: str | None = None, **kw: Any
    ) -> Kube:
        """A client from a kubeconfig file (None: $KUBECONFIG or ~/.kube/config)."""
        where = str(path) if path else "the default kubeconfig ($KUBECONFIG or ~/.kube/config)"
        configuration = client.Configuration()
        try:
            config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=str(path) if path else None,
                context=context,
                client_configuration=configuration,
            )
        except (ConfigException, OSError, ValueError, TypeError, KeyError, yaml.YAMLError) as exc:
            raise ConfigError(
                f"cannot use the kubeconfig {where}: {exc}",
                hint="pass a valid file with --kubeconfig (check it with `kubectl --kubeconfig "
                "FILE get nodes`)",
            ) from None
        configuration.retries = 0  # the loop retries: a dead server must answer quickly
        return cls(client.ApiClient(configuration), **kw)

    @classmethod
    def in_cluster(
        cls,
        *,
        token_file: str | Path = SERVICE_TOKEN_FILENAME,
        ca_file: str | Path = SERVICE_CERT_FILENAME,
        **kw: Any,
    ) -> Kube:
        """A client for a server that runs in a pod: no kubeconfig there, but the API server's
        address in $KUBERNETES_SERVICE_HOST/PORT and the ServiceAccount's token and CA mounted
        by the kubelet. The token is read again every minute: the kubelet rotates bound tokens."""
        configuration = client.Configuration()
        try:
            InClusterConfigLoader(  # type: ignore[no-untyped-call]
                token_filename=str(token_file), cert_filename=str(ca_file), try_refresh_token=True
            ).load_and_set(configuration)
        except (ConfigException, OSError) as exc:
            raise ConfigError(
                f"cannot use the in-cluster configuration: {exc}",
                hint="run in a pod with a ServiceAccount token mounted "
                "(automountServiceAccountToken), or give a kubeconfig with --kubeconfig",
            ) from None
        configuration.retries = 0  # as from_kubeconfig: the loop retries
        return cls(client.ApiClient(configuration), **kw)

    @property
    def server(self) -> str:
        return str(self.api.configuration.host)

    def call(self, fn: Callable[..., T], *args: Any, what: str, **kw: Any) -> T:
        """`fn(*args, **kw)` with a timeout; failures as domain errors naming `what`."""
        kw.setdefault("_request_timeout", self.timeout_s)
        try:
            return fn(*args, **kw)
        except ApiException as exc:
            raise translate(exc, what) from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise unreachable(self.server, what, exc) from None

    def retry_conflicts(self, attempt: Callable[[], T], *, what: str) -> T:
        """Read-modify-write with the object's resourceVersion: a 409 means someone wrote first,
        so read again and redo the change (a few times, then give up with the Conflict)."""
        for n in range(CONFLICT_RETRIES):
            try:
                return attempt()
            except Conflict:
                if n == CONFLICT_RETRIES - 1:
                    raise
                log.info("%s: conflict (someone else wrote first), retrying", what)
                time.sleep(0.05 * (n + 1))
        raise AssertionError("unreachable")  # pragma: no cover

    def raw(self, method: str, path: str, body: Any = None, *, what: str) -> Any:
        """A JSON call the typed client has no method for (policy/v1beta1 on old servers)."""
        headers = {"Accept": "application/json", "Content-Type": "application/json"}
        request = self.api.param_serialize(
            method, path, header_params=headers, body=body, auth_settings=["BearerToken"]
        )
        response = self.call(self.api.call_api, *request, what=what)
        response.read()  # type: ignore[no-untyped-call]
        if not 200 <= response.status < 300:
            raise translate(ApiException(http_resp=response), what)
        return json.loads(response.data) if response.data else None

    def eviction_version(self) -> str:
        """Which Eviction `pods/eviction` takes (policy/v1 from 1.22, policy/v1beta1 before),
        asked of discovery as `kubectl drain` does; cached for the client's life."""
        if self._eviction_version is None:
            found = self.call(self.core.get_api_resources, what="API discovery (/api/v1)")
            for resource in found.resources:
                if resource.name == "pods/eviction":
                    group, version = resource.group or "policy", resource.version or "v1"
                    self._eviction_version = f"{group}/{version}"
                    break
            else:
                raise Unavailable(
                    f"the API server at {self.server} serves no pods/eviction subresource",
                    hint="use a Kubernetes API server ≥ 1.8",
                )
        return self._eviction_version

    def check_namespace(self, namespace: str) -> None:
        """`ConfigError` unless `namespace` exists (pods and claims would all be refused)."""
        try:
            self.call(self.core.read_namespace, namespace, what=f"reading namespace {namespace}")
        except NotFound:
            raise ConfigError(
                f"the namespace {namespace} does not exist on {self.server}",
                hint=f"create it (`kubectl create namespace {namespace}`) or pass --namespace",
            ) from None

    def close(self) -> None:
        self.api.close()  # type: ignore[no-untyped-call]


def unreachable(server: str, what: str, exc: BaseException) -> Unavailable:
    return Unavailable(
        f"cannot reach the Kubernetes API server at {server} ({what}): {type(exc).__name__}",
        hint="check that it runs and that --kubeconfig points at it "
        "(`kubectl --kubeconfig FILE get --raw /readyz`)",
    )


def translate(exc: ApiException, what: str) -> LowcostgpuError:
    """An API error as a domain error: the server's own message, plus what to do."""
    message = f"Kubernetes refused {what}: {_message(exc)}"
    status = exc.status or 0
    if status == 401:
        return Unauthenticated(message, hint="the kubeconfig's credentials were not accepted")
    if status == 403:
        return Forbidden(
            message,
            hint="grant the kubeconfig's user the rights of deploy/kubernetes/rbac.yaml (nodes: "
            "get, list, patch; pods, pods/eviction, pods/log, secrets (create, delete), "
            "persistentvolumeclaims and events.k8s.io events (create); see docs/kubernetes.md)",
        )
    if status == 404:
        return NotFound(message)
    if status == 409:
        return Conflict(message, reason=_reason(exc))
    if status in (400, 422):
        return InvalidRequest(message, hint="the object was refused by the API server's checks")
    if status == 429:
        return TooManyRequests(message, hint="retried until the drain deadline")
    return Unavailable(message, hint="the API server failed; the loop retries")


def _status(exc: ApiException) -> dict[str, Any]:
    try:
        body = json.loads(exc.body or "{}")
    except (TypeError, ValueError):
        return {}
    return body if isinstance(body, dict) else {}


def _message(exc: ApiException) -> str:
    return str(_status(exc).get("message") or exc.reason or f"HTTP {exc.status}")


def _reason(exc: ApiException) -> str:
    return str(_status(exc).get("reason") or "")


def already_exists(error: Conflict) -> bool:
    return error.details.get("reason") == "AlreadyExists"
