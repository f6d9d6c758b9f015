"""The live timeline of an instance, as the product page shows it:

    ✓ instance i-b3e19d02 running · $0.234/hr
    # 03:12 interrupted — checkpoint step 4200 on volume
    # 03:57 capacity free — auto-restarted, resumed 4200
    ✓ run finished · 9.4 GPU-hrs · $2.20

Times are elapsed since the launch (mm:ss, or h:mm:ss past an hour). Lines come from the
instance's events; the last one from the meter, once it has closed the run's last interval.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from lowcostgpu.client.api import Client, Event, Instance

FINAL = {"succeeded", "failed", "stopped", "deleted"}
POLL_S = 0.5


def elapsed(seconds: int) -> str:
    seconds = max(0, seconds)
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


def gpu_hours(seconds: int) -> str:
    hours = Decimal(seconds) / 3600
    return f"{hours:.1f}" if hours >= 1 else f"{hours:.4f}"


class Timeline:
    def __init__(self, client: Client, instance: Instance, say: Callable[[str], None]) -> None:
        self.client = client
        self.instance = instance
        self.say = say
        self.start = instance["created_at"]
        self.after = 0
        self.running_shown = False
        self.interrupted_step: int | None = None
        self.resumed_step: int | None = None

    def line(self, event: Event) -> str | None:
        at = elapsed(event["at"] - self.start)
        reason, data = event["reason"], event["data"]
        if reason == "Started" and not self.running_shown:
            self.running_shown = True
            inst = self.instance
            return f"✓ instance {inst['id']} running · ${inst['price_per_hour']}/hr"
        if reason == "Queued" and not self.running_shown:
            queue: dict[str, Any] = dict(self.client.instance(self.instance["id"])["queue"] or {})
            if not queue:
                return None  # already placed
            eta = queue.get("eta_s")
            where = f"position {queue['position']}"
            return f"# {at} queued ({where}, ETA {'unknown' if eta is None else f'{eta} s'})"
        if reason == "Interrupted":
            self.interrupted_step = data.get("last_checkpoint_step")
            return f"# {at} {event['message']}"
        if reason == "Restarted":
            self.resumed_step = data.get("resume_step")
            return f"# {at} capacity free — auto-restarted, resumed {self.resumed_step}"
        if reason in ("Failed", "Stopped"):
            return f"✗ {at} {event['message']}"
        return None

    def poll(self) -> Instance:
        """Print what happened since the last poll; the instance as it is now."""
        events = self.client.timeline(self.instance["id"], after=self.after)
        for event in events:
            self.after = max(self.after, event["seq"] or 0)
            text = self.line(event)
            if text:
                self.say(text)
        self.instance = self.client.instance(self.instance["id"])
        return self.instance

    def follow(self, timeout_s: float | None = None) -> Instance:
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while self.poll()["status"] not in FINAL:
            if deadline is not None and time.monotonic() > deadline:
                break
            time.sleep(POLL_S)
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
            f"✓ {word} · {gpu_hours(usage['gpu_seconds'])} GPU-hrs · ${usage['amount']}"
            f" (exact ${usage['amount_exact']})"
        )
        return usage
