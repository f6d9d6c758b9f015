"""The reconcile loop: one tick at a time, sleeping until the next deadline or the next request.

Only the holder of the store's lead lock acts (ticks and carries out effects); another server on
the same store keeps trying to take the lead, and serves reads meanwhile. Deadlines live in the
store, so a loop that takes over after a crash finds them when it loads the live state. A tick
that has nothing to do writes nothing and does not wake the loop again: an idle server sleeps
until the next deadline, a request, or the poll interval. A tick costs what changed, not what
runs: between full looks it takes in only the runtime's changed reports
(`app.runtime_reports.ReportObserver`), so 10,000 idle workloads cost ~0.1 % of a core.
"""

from __future__ import annotations

import logging
import threading

from lowcostgpu.app.plane import ControlPlane
from lowcostgpu.domain.errors import LowcostgpuError

log = logging.getLogger(__name__)
STANDBY_RETRY_S = 2.0


class ReconcileLoop:
    def __init__(self, plane: ControlPlane, owner: str) -> None:
        self.plane = plane
        self.owner = owner
        self.leading = False
        self.stopping = threading.Event()
        self.ticks = 0

    def run(self) -> None:
        while not self.stopping.is_set():
            if not self.plane.store.try_lead(self.owner):
                if self.leading:
                    log.warning("this server lost the lead: it serves reads until it leads again")
                self.leading, self.plane.standby = False, True
                self.plane.reload()  # what it kept in memory may be stale by the time it leads
                self.stopping.wait(STANDBY_RETRY_S)
                continue
            if not self.leading:
                log.info("this server leads: it ticks and carries out effects")
                self.plane.reload()  # the live state is loaded as the last leader left it
            self.leading, self.plane.standby = True, False
            self.plane.wake.wait(self._sleep_s(self._tick()))
            self.plane.wake.clear()
        if self.leading:
            self.plane.store.release_lead(self.owner)

    def _tick(self) -> int | None:
        try:
            wake_at = self.plane.tick()
        except LowcostgpuError as exc:
            log.warning("tick failed, retrying: %s", exc)
            return None
        except Exception:  # a bug must not stop the control plane: log it, tick again
            log.exception("tick failed unexpectedly, retrying")
            return None
        self.ticks += 1
        return wake_at

    def _sleep_s(self, wake_at: int | None) -> float:
        poll = self.plane.config.poll_interval_s
        if wake_at is None:
            return poll
        return max(0.0, min(poll, wake_at - self.plane.clock.now()))

    def stop(self) -> None:
        self.stopping.set()
        self.plane.wake.set()
