"""`launch --wait`: the instance id first, then one live status line, until the run ends.

    ✓ instance i-3f2a… queued · position 2 · ETA unknown · $0.234/hr
    # 00:41 interrupted — checkpoint step 180 on volume        (timeline lines, as they happen)
    … queued · position 1 · ETA unknown · checkpoint step 180  (the status line)

On a terminal the status line is one Rich line, redrawn in place, with the timeline's lines
printed above it; anywhere else (a pipe, a test's runner) it is a plain line printed each time it
changes, so a log reads the same story. Why it is sturdy:

- it follows with long-polls (`Timeline.poll(wait_s=…)`): an event of the instance answers at
  once, and between events one request per `LONG_POLL_S` refreshes the queue position;
- a server that goes away (restart, refused or reset connections, 5xx) does not end the wait:
  `client.reconnecting.Reconnecting` says so once, asks again, and says when it is back;
- Ctrl-C detaches: the instance keeps running, and the line says how to follow it again.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import TracebackType
from typing import Any

import typer
from rich.console import Console
from rich.live import Live
from rich.text import Text

from lowcostgpu.cli import format as fmt
from lowcostgpu.cli.timeline import FINAL, Timeline
from lowcostgpu.client.api import Client
from lowcostgpu.client.reconnecting import RECONNECT_GIVE_UP_S, Reconnecting
from lowcostgpu.client.records import Instance
from lowcostgpu.domain.elapsed import elapsed

LONG_POLL_S = 2.0  # the longest the status line waits for a change it is not told of
DOWN = "! server unreachable, reconnecting…"
BACK = "✓ server back, following again"


def eta_text(eta_s: int | None) -> str:
    """ "unknown" when there is no honest estimate (`core.eta`), never a made-up number."""
    if eta_s is None:
        return "unknown"
    return "now" if eta_s <= 0 else f"in {elapsed(eta_s)}"


def launched_line(inst: Instance) -> str:
    """The first line: the instance id, its state, where it is queued, its price."""
    queue = inst.get("queue")
    where = ""
    if queue and inst["status"] == "queued":
        where = f" · position {queue['position']} · ETA {eta_text(queue['eta_s'])}"
    return f"✓ instance {inst['id']} {inst['status']}{where} · {fmt.rate(inst['price_per_hour'])}"


def status_text(inst: Instance) -> str:
    """State, queue position and ETA (while queued), and the last checkpoint step."""
    parts = [inst["status"]]
    queue = inst.get("queue")
    if queue and inst["status"] == "queued":
        parts += [f"position {queue['position']}", f"ETA {eta_text(queue['eta_s'])}"]
    step = inst["last_checkpoint_step"]
    parts.append("no checkpoint yet" if step is None else f"checkpoint step {step}")
    return " · ".join(parts)


def detached_line(instance_id: str) -> str:
    return f"detached — {instance_id} keeps running; lowcostgpu logs -f {instance_id}"


class StatusLine:
    """Where the wait writes: `say` prints a line for good, `show` sets the status line."""

    def __init__(self, live: bool) -> None:
        self.shown: str | None = None
        self._live = Live(Text(""), console=Console(), transient=True) if live else None

    def __enter__(self) -> StatusLine:
        if self._live is not None:
            self._live.start()
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        if self._live is not None:
            self._live.stop()

    def say(self, line: str) -> None:
        if self._live is None:
            typer.echo(line)
        else:
            self._live.console.print(line, markup=False, highlight=False)

    def show(self, status: str) -> None:
        if status == self.shown:
            return
        self.shown = status
        if self._live is None:
            typer.echo(f"… {status}")
        else:
            self._live.update(Text(f"… {status}", style="dim"))


def wait(
    api: Client,
    inst: Instance,
    *,
    live: bool | None = None,
    give_up_s: float = RECONNECT_GIVE_UP_S,
    poll_s: float = LONG_POLL_S,
    sleep: Callable[[float], None] | None = None,
) -> tuple[Instance, dict[str, Any]]:
    """Follow `inst` until its run ends; the instance then, and its usage (the bill's figures).

    Ctrl-C prints `detached_line` and exits 0: the instance is not touched."""
    screen = StatusLine(sys.stdout.isatty() if live is None else live)
    screen.say(launched_line(inst))
    timeline = Timeline(api, inst, screen.say, running_shown=inst["status"] == "running")
    link = Reconnecting(lambda _: screen.say(DOWN), lambda: screen.say(BACK), give_up_s)
    if sleep is not None:
        link.sleep = sleep
    try:
        with screen:
            now = inst
            while now["status"] not in FINAL:
                screen.show(status_text(now))
                now = link.call(lambda: timeline.poll(wait_s=poll_s))
            usage = link.call(timeline.finish)
    except KeyboardInterrupt:
        typer.echo(detached_line(inst["id"]))
        raise typer.Exit(0) from None
    return now, usage
