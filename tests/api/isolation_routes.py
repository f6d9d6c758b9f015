"""The routes of the OpenAPI document as the isolation suite sees them (`test_isolation.py`):
whose key opens each, the ids it takes, a valid body, and the cases the suite calls it with.

A route is read from the server's own document, so one added later is swept too; the tables
here are what the suite cannot read from the document (a body that would act if a check let it
through, the variants of a route worth trying).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from isolation_world import ADMIN, GPU, Tenant, never_existed

# A valid body for every route that needs one: a leak would act (the target 0 -> 1, a credit).
BODIES: dict[tuple[str, str], Any] = {
    ("POST", "/v1/instances"): {"gpu": GPU, "command": ["true"]},
    ("POST", "/v1/clusters"): {"gpu": GPU, "gpus_per_node": 1, "standard_nodes": 1},
    ("PATCH", "/v1/clusters/{cluster_id}"): {"desired_preemptible_gpus": 1},
    ("POST", "/v1/clusters/{cluster_id}/nodes/{node_id}/convert"): {"compute_class": "preemptible"},
    ("POST", "/v1/webhooks"): {"url": "http://127.0.0.1:9/hook"},
    ("POST", "/v1/accounts"): {"name": "made-by-a-wrong-key"},
    ("POST", "/v1/accounts/{account_id}/topup"): {"amount": "5.00"},
    ("POST", "/v1/metadata/checkpoint"): {"step": 987654},
    ("POST", "/v1/metadata/complete"): {"step": 987654},
    ("PATCH", "/v1/volumes/{volume_name}"): {"size_gb": 2},
}
# Query parameters that name objects, and the searches that aim them at the victim's.
ID_QUERIES = {("GET", "/v1/events", "object")}
# Request-body fields that name objects (none today): each needs a case in this suite.
BODY_IDS: set[tuple[str, str, str]] = set()
# Variants of id routes to try too: a long-poll or stream must refuse before it waits.
VARIANTS = {
    ("GET", "/v1/instances/{instance_id}/logs"): "?follow=true&tail_bytes=1",
    ("GET", "/v1/instances/{instance_id}/events"): "?after=0",
}
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
REACHED = frozenset({200, 201, 202, 204, 409})  # the handler ran (409: refused by the state)
# The order the controls run in on the intruder's own objects: reads, changes, then deletions.
ORDER = {"GET": 0, "PATCH": 1, "PUT": 1, "POST": 2, "DELETE": 3}


@dataclass(frozen=True)
class Route:
    method: str
    template: str
    tags: tuple[str, ...]
    body_required: bool = False
    queries: tuple[str, ...] = ()  # its query parameters
    body_fields: tuple[str, ...] = ()  # the top-level fields of its JSON body

    @property
    def params(self) -> list[str]:
        return re.findall(r"{(\w+)}", self.template)

    @property
    def kind(self) -> str:
        """Whose key opens it: `admin`, `metadata` (an instance token), `account`, or `open`
        (outside /v1/, or tagged `public` in the document: the prices)."""
        if not self.template.startswith("/v1/") or "public" in self.tags:
            return "open"
        if self.template.startswith("/v1/metadata/"):
            return "metadata"
        return "admin" if "admin" in self.tags else "account"

    def path(self, ids: dict[str, str]) -> str:
        return self.template.format_map(ids)

    @property
    def body(self) -> Any:
        return BODIES.get((self.method, self.template))

    def __str__(self) -> str:
        return f"{self.method} {self.template}"


def route_of(doc: dict[str, Any], method: str, template: str, op: dict[str, Any]) -> Route:
    body = op.get("requestBody", {})
    schema = body.get("content", {}).get("application/json", {}).get("schema", {})
    if "$ref" in schema:
        schema = doc["components"]["schemas"][schema["$ref"].rsplit("/", 1)[-1]]
    queries = [p["name"] for p in op.get("parameters", ()) if p["in"] == "query"]
    return Route(
        method,
        template,
        tuple(op.get("tags", ())),
        bool(body.get("required")),
        tuple(queries),
        tuple(schema.get("properties", {})),
    )


def load_routes(doc: dict[str, Any]) -> list[Route]:
    """Every (method, path) of the OpenAPI document `doc`."""
    return [
        route_of(doc, method.upper(), template, op)
        for template, ops in sorted(doc["paths"].items())
        for method, op in sorted(ops.items())
    ]


def names_an_object(name: str) -> bool:
    return name in {"id", "object"} or name.endswith("_id") or name.endswith("_ids")


def fakes(t: Tenant) -> dict[str, str]:
    return {name: never_existed(real) for name, real in t.ids.items()}


def masked(text: str, real: dict[str, str]) -> str:
    """`text` with each of the real ids replaced by its never-existed twin, longest first (a
    node id contains its cluster's)."""
    for value in sorted(real.values(), key=len, reverse=True):
        text = text.replace(value, never_existed(value))
    return text


def key_of(route: Route, t: Tenant) -> dict[str, str]:
    """The key that would open `route` on `t`'s own objects."""
    return ADMIN if route.kind == "admin" else t.auth


def sweep(routes: list[Route]) -> Iterator[tuple[Route, int, str]]:
    """Every id route with the refusal it must give (404 for an account's objects, 403 for an
    admin route), its variants, and every method it does not have (405)."""
    with_ids = [r for r in routes if r.params]
    for route in with_ids:
        expected = 403 if route.kind == "admin" else 404
        yield route, expected, ""
        variant = VARIANTS.get((route.method, route.template))
        if variant:
            yield route, expected, variant
    templates = {r.template: r for r in with_ids}
    defined = {(r.method, r.template) for r in routes}
    for template, route in sorted(templates.items()):
        for method in METHODS:
            if (method, template) not in defined:
                yield Route(method, template, route.tags), 405, ""
