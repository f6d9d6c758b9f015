"""Background loops that do not stay dead: each runs under a supervisor that starts it again.

A loop thread that dies (an exception nobody caught, or a return before the server stops) used
to take its work with it for every account until a restart: the webhook sender killed by one
customer's URL delivered nothing to anyone afterwards. Under the supervisor a loop that dies is
logged with its traceback (once per distinct error in a row, so a loop that keeps dying on the
same thing does not fill the disk with tracebacks), started again after a backoff that doubles
while it keeps dying (and starts anew once it ran for `healthy_after_s`), and counted per loop
(`restarts`, exported by /metrics as `lowcostgpu_background_restarts_total{loop=…}`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RestartPolicy:
    first_backoff_s: float = 0.5
    max_backoff_s: float = 30.0
    healthy_after_s: float = 60.0  # a loop that ran this long before dying starts the backoff anew

    def backoff_s(self, deaths_in_a_row: int) -> float:
        return float(min(self.max_backoff_s, self.first_backoff_s * 2 ** (deaths_in_a_row - 1)))


class Supervisor:
    def __init__(
        self,
        stopping: threading.Event,
        policy: RestartPolicy | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stopping = stopping
        self.policy = policy or RestartPolicy()
        self.monotonic = monotonic
        self.restarts: dict[str, int] = {}
        self._threads: dict[str, threading.Thread] = {}
        self._lock = threading.Lock()

    def start(self, name: str, loop: Callable[[], None]) -> threading.Thread:
        """Run `loop` in a daemon thread of its own, started again whenever it dies."""
        thread = threading.Thread(target=self._keep, args=(name, loop), name=name, daemon=True)
        with self._lock:
            if name in self._threads:
                raise ValueError(f"a loop named {name!r} is already supervised")
            self.restarts[name] = 0
            self._threads[name] = thread
        thread.start()
        return thread

    def counts(self) -> dict[str, int]:
        """Restarts per loop so far (a copy, for /metrics)."""
        with self._lock:
            return dict(self.restarts)

    def join(self, timeout_s: float) -> list[str]:
        """Wait up to `timeout_s` in all for the loops to end; the names of those still running."""
        deadline = self.monotonic() + timeout_s
        with self._lock:
            threads = dict(self._threads)
        for thread in threads.values():
            thread.join(max(0.0, deadline - self.monotonic()))
        return [name for name, thread in threads.items() if thread.is_alive()]

    def _keep(self, name: str, loop: Callable[[], None]) -> None:
        deaths, last_why = 0, ""
        while not self.stopping.is_set():
            started = self.monotonic()
            try:
                loop()
                why, error = "it returned before the server stopped", None
            except Exception as exc:
                why, error = f"{type(exc).__name__}: {exc}", exc
            if self.stopping.is_set():
                return
            ran_s = self.monotonic() - started
            deaths = 1 if ran_s >= self.policy.healthy_after_s else deaths + 1
            wait_s = self.policy.backoff_s(deaths)
            with self._lock:
                self.restarts[name] += 1
            message = "background loop %s died after %.1f s (%s); restarting in %.1f s"
            if why != last_why:
                log.error(message, name, ran_s, why, wait_s, exc_info=error)
            else:
                log.warning(message + " (the same error again)", name, ran_s, why, wait_s)
            last_why = why
            self.stopping.wait(wait_s)
