"""A `PreemptionRisk` event goes to the webhooks of the warned instance's owner that want it."""

from __future__ import annotations

import pytest

from lowcostgpu.domain.events import EventType, Reason, event_type_of
from lowcostgpu.ports.records import EventRecord, WebhookEndpoint
from lowcostgpu.ports.webhooks import fan_out


def _endpoint(name: str, account: str, reasons: tuple[str, ...]) -> WebhookEndpoint:
    return WebhookEndpoint(name, account, f"https://example.com/{name}", "whsec_x", 0, reasons)


@pytest.mark.parametrize(
    ("endpoint", "delivered"),
    [
        (_endpoint("all", "acme", ()), True),  # no reasons: every event
        (_endpoint("risk", "acme", ("PreemptionRisk",)), True),
        (_endpoint("reclaims", "acme", ("Preempted",)), False),
        (_endpoint("other", "bigco", ()), False),  # another account's endpoint: never
    ],
)
def test_the_warning_reaches_the_owners_endpoints_that_want_it(
    endpoint: WebhookEndpoint, delivered: bool
) -> None:
    event = EventRecord(
        "k", 1000, "acme", "instance", "i-1", event_type_of(Reason.PREEMPTION_RISK),
        Reason.PREEMPTION_RISK, "at risk", {"risk": "next"},
    )  # fmt: skip
    deliveries = fan_out([endpoint], event, 7)
    assert bool(deliveries) is delivered
    if delivered:
        assert deliveries[0].payload["type"] == "instance.PreemptionRisk"


def test_the_warning_is_a_warning() -> None:
    assert event_type_of(Reason.PREEMPTION_RISK) is EventType.WARNING
