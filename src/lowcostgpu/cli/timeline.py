"""The live timeline of an instance, as the product page shows it:

    ✓ instance i-b3e19d02 running · $0.234/hr
    # 3:12:40 interrupted — checkpoint step 4200 on volume
    # 3:57:00 capacity free — auto-restarted, resumed 4200
    ✓ run finished · 9.4 GPU-hrs · $2.20

Times are elapsed since the launch (`domain.elapsed`: mm:ss, or h:mm:ss past an hour). Lines come
from the instance's events; the last one from the meter, once it has closed the run's last
interval. Where it is queued, and its ETA, are `cli.wait`'s live status line, not a line here.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from decimal import Decimal

from lowcostgpu.cli import format as fmt
from lowcostgpu.client.api import Client
from lowcostgpu.client.records import Event, Instance
from lowcostgpu.domain.elapsed import elapsed

__all__ = ["FINAL", "Timeline", "elapsed", "gpu_hours"]

FINAL = {"succeeded", "failed", "stopped", "deleted"}


def gpu_hours(seconds: int) -> str:
    hours = Decimal(seconds) / 3600
    return f"{hours:.1f}" if hours >= 1 else f"{hours:.4f}"


class Timeline:
    def __init__(
        self,
        client: Client,
        instance: Instance,
        say: Callable[[str], None],
        *,
        running_shown: bool = False,
    ) -> None:
        self.client = client
        self.instance = instance
        self.say = say
        self.start = instance["created_at"]
        self.after = 0
        self.running_shown = running_shown  # the "✓ instance … running" line was printed
        self.interrupted_step: int | None = None
        self.resumed_step: int | None = None

    def line(self, event: Event) -> str | None:
        at = elapsed(event["at"] - self.start)
        reason, data = event["reason"], event["data"]
        if reason == "Started" and not self.running_shown:
            self.running_shown = True
            inst = self.instance
            return f"✓ instance {inst['id']} running · {fmt.rate(inst['price_per_hour'])}"
        if reason == "Interrupted":
            self.interrupted_step = data.get("last_checkpoint_step")
            return f"# {at} {event['message']}"
        if reason == "Restarted":
            self.resumed_step = data.get("resume_step")
            return f"# {at} capacity free — auto-restarted, resumed {self.resumed_step}"
        if reason in ("Failed", "Stopped"):
            return f"✗ {at} {event['message']}"
        return None

    def poll(self, wait_s: float = 0) -> Instance:
        """Print what happened since the last poll; the instance as it is now. With `wait_s`,
        a long-poll (`GET /v1/events?object=…&wait_s=…`): it answers as soon as the instance has
        a new event, else after `wait_s`. A poll that fails part-way is safe to repeat: the
        events printed are behind `after`."""
        instance_id = self.instance["id"]
        if wait_s > 0:
            events = self.client.events(self.after, 1000, object=instance_id, wait_s=wait_s)
        else:
            events = self.client.timeline(instance_id, after=self.after)
        for event in events:
            self.after = max(self.after, event["seq"] or 0)
            text = self.line(event)
            if text:
                self.say(text)
        self.instance = self.client.instance(self.instance["id"])
        return self.instance

    def finish(self, meter_wait_s: float = 150) -> dict[str, object]:
        """Wait for the meter to close the run's last interval, then print the run's bill."""
        ended = max((e["at"] for e in self.client.timeline(self.instance["id"])), default=0)
        deadline = time.monotonic() + meter_wait_s
        usage = self.client.usage(self.instance["id"])
        while (usage["metered_through"] or 0) < ended and time.monotonic() < deadline:
            time.sleep(1)
            usage = self.client.usage(self.instance["id"])
        word = "run finished" if self.instance["status"] == "succeeded" else "run ended"
        self.say(
            f"✓ {word} · {gpu_hours(usage['gpu_seconds'])} GPU-hrs · {fmt.cents(usage['amount'])}"
        )
        return usage
