"""Signal handlers that take no lock: the handler writes the signal's number down a pipe, and a
daemon thread does the work.

Python runs a handler on the main thread between two bytecodes, possibly while that thread holds
a lock the handler would take: `threading.Event.set` inside the main thread's own
`Event.wait(timeout)` (it holds the Event's lock for a few bytecodes around each wake-up), a
logging handler's lock, a queue's. The handler then waits for itself and the process hangs until
someone sends SIGKILL. A write to a non-blocking pipe takes no lock, and the relay thread is free
to take any.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from types import FrameType


class SignalRelay:
    """`handler` is a lock-free signal handler; `then(signum)` runs on the relay's thread, once
    per signal delivered, in order. A forked child inherits the handler but not the thread: its
    signals are dropped (the parent's relay must not act on a child's signal)."""

    def __init__(self, then: Callable[[int], None], name: str = "lowcostgpu-signals") -> None:
        self._then = then
        read_fd, self._write_fd = os.pipe()
        os.set_blocking(self._write_fd, False)
        self._pid = os.getpid()
        self._closed = False
        self._thread = threading.Thread(target=self._relay, args=(read_fd,), name=name, daemon=True)
        self._thread.start()

    def handler(self, signum: int, frame: FrameType | None) -> None:
        """Lock-free: one non-blocking write (a full pipe drops the signal: 64 KiB of them)."""
        if self._closed or os.getpid() != self._pid:
            return
        with contextlib.suppress(OSError):
            os.write(self._write_fd, bytes([signum & 0xFF]))

    def close(self) -> None:
        """Stop the relay once it has passed on what it holds (its thread sees end of file)."""
        if not self._closed:
            self._closed = True
            os.close(self._write_fd)
            self._thread.join(timeout=5.0)

    def _relay(self, read_fd: int) -> None:
        try:
            while signums := os.read(read_fd, 64):
                for signum in signums:
                    self._then(signum)
        finally:
            os.close(read_fd)
