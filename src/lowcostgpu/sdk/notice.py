"""The interruption notice: SIGTERM at T+0, noticed by polling a flag between steps.

The handler only records the time and wakes a relay thread. Doing real work (saving a checkpoint)
inside a signal handler would run it in the middle of an arbitrary bytecode of the training step;
instead the loop finishes its step, sees the flag, checkpoints and exits well before the SIGKILL
deadline. The handler takes no lock either (`SignalRelay`: a lock there could be the one the
main thread holds, and the workload would hang until the SIGKILL).

Before any notice, the metadata endpoint may say the instance is *at risk* (`{"action": "none",
"risk": "next", "risk_since": ...}`: it is among the next an on-demand request would reclaim).
`watch` reads it too, and `early_save_due()` is then True once per risk episode (a new
`risk_since`): the loop saves a checkpoint through its usual save path, early, so that a reclaim
finds almost nothing to lose. The advice costs one save per episode, never a stop.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable, Mapping
from types import FrameType
from typing import Any, Protocol

from lowcostgpu.sdk.signal_relay import SignalRelay

log = logging.getLogger("lowcostgpu.sdk")

# 128 + SIGTERM: what a shell reports for a process ended by SIGTERM. A workload that stops
# after a notice exits with it, so that "stopped because we were asked to" is never mistaken for
# success (0) by tools that only read the exit status (Kubernetes Jobs, Slurm, CI). The control
# plane itself treats any exit after a notice as an interruption, whatever its code.
EXIT_INTERRUPTED = 143
RISK_NEXT = "next"  # the metadata endpoint's `risk`: among the next victims
SIGTERM_REASON = "SIGTERM"


class _InterruptionSource(Protocol):
    def interruption(self) -> dict[str, Any] | None: ...


class StopNotice:
    """A stop request: set by SIGTERM, by the metadata endpoint's notice, or by hand."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._event = threading.Event()
        self._requested_at: float | None = None
        self._reason: str | None = None
        self._installed = False
        self._request_lock = threading.Lock()
        self._signalled_at: float | None = None  # set by the handler only: no lock there
        self._relay: SignalRelay | None = None
        self._watcher: threading.Thread | None = None
        self._risk_lock = threading.Lock()
        self._risk_since: object = None  # the current risk episode (its `risk_since`), or None
        self._early_save_pending = False

    @property
    def requested(self) -> bool:
        """True from the handler's return on, before the relay thread has even run."""
        return self._event.is_set() or self._signalled_at is not None

    @property
    def requested_at(self) -> float | None:
        """Clock reading (default: time.monotonic) when the first stop request arrived."""
        return self._requested_at if self._event.is_set() else self._signalled_at

    @property
    def reason(self) -> str | None:
        if self._event.is_set():
            return self._reason
        return SIGTERM_REASON if self._signalled_at is not None else None

    @property
    def installed(self) -> bool:
        return self._installed

    def request(self, reason: str = "requested") -> None:
        """Mark the stop as requested; only the first request's time and reason are kept (a
        SIGTERM the relay has not passed on yet came first). Never call it from a signal
        handler."""
        with self._request_lock:
            if self._event.is_set():
                return
            if self._signalled_at is not None:
                self._requested_at, self._reason = self._signalled_at, SIGTERM_REASON
            else:
                self._requested_at, self._reason = self._clock(), reason
            self._event.set()

    def wait(self, timeout_s: float | None = None) -> bool:
        """Block until a stop is requested (or the timeout passes); True if requested."""
        return self.requested or self._event.wait(timeout_s)

    def install(self) -> StopNotice:
        """Install the SIGTERM handler; idempotent. Python only allows it on the main thread."""
        if self._installed:
            return self
        if threading.current_thread() is not threading.main_thread():
            raise RuntimeError(
                "StopNotice.install() must run on the main thread (Python delivers signals "
                "only there); call it before starting worker threads"
            )
        self._relay = SignalRelay(lambda _: self.request(SIGTERM_REASON), "lowcostgpu-sigterm")
        signal.signal(signal.SIGTERM, self._on_sigterm)
        self._installed = True
        return self

    @property
    def at_risk(self) -> bool:
        """Whether the endpoint last said this instance is among the next victims."""
        return self._risk_since is not None

    def note_risk(self, answer: Mapping[str, Any] | None) -> None:
        """Take in the endpoint's answer: a risk episode not seen before makes one early save
        due; an answer without risk (none, a 404, a server without warnings) ends the episode
        and drops a save not yet taken (the pool recovered: there is nothing to hurry)."""
        risky = answer is not None and answer.get("risk") == RISK_NEXT
        since = answer.get("risk_since", True) if risky and answer is not None else None
        with self._risk_lock:
            if since is None:
                self._risk_since, self._early_save_pending = None, False
            elif since != self._risk_since:
                self._risk_since, self._early_save_pending = since, True

    def early_save_due(self) -> bool:
        """True once per risk episode, the first time it is asked after the episode began:
        save a checkpoint now, with the loop's usual save. False after a stop request (the
        loop saves for the stop anyway)."""
        with self._risk_lock:
            due = self._early_save_pending and not self.requested
            self._early_save_pending = False
        return due

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        """Lock-free: a plain assignment and the relay's write (see the module docstring)."""
        if self._signalled_at is not None:
            return
        self._signalled_at = self._clock()
        if self._relay is not None:
            self._relay.handler(signum, frame)

    def watch(self, source: _InterruptionSource, interval_s: float = 5.0) -> None:
        """Also poll the metadata endpoint for a notice, in case SIGTERM does not reach us, and
        for a preemption risk (`note_risk`, then `early_save_due`).

        Runs in a daemon thread so a slow endpoint never blocks a training step.
        """
        if self._watcher is not None:
            return

        def poll() -> None:
            while not self._event.wait(interval_s):
                notice = source.interruption()
                if notice is not None and notice.get("action") == "stop":
                    self.request("metadata notice")
                else:
                    self.note_risk(notice)

        self._watcher = threading.Thread(target=poll, name="lowcostgpu-notice", daemon=True)
        self._watcher.start()


_default: StopNotice | None = None
_default_lock = threading.Lock()


def install_sigterm_handler() -> StopNotice:
    """The process-wide notice, created and installed on first call (main thread only)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = StopNotice()
        notice = _default
    return notice.install()


def default_notice() -> StopNotice:
    """The process-wide notice; installed when called on the main thread, else left as is."""
    if threading.current_thread() is threading.main_thread():
        return install_sigterm_handler()
    global _default
    with _default_lock:
        if _default is None:
            _default = StopNotice()
            log.warning(
                "lowcostgpu: SIGTERM handler not installed (not on the main thread); "
                "call install_sigterm_handler() from the main thread at start-up"
            )
        return _default


def should_stop() -> bool:
    """True once SIGTERM arrived; the first call installs the handler if it is not yet installed."""
    return default_notice().requested
