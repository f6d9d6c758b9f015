"""Run a workload in its own process group and signal it when it prints a given line."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

WATCHDOG_S = 300.0


@dataclass
class Finished:
    returncode: int
    lines: list[str]

    @property
    def text(self) -> str:
        return "".join(self.lines)


def run_workload(
    args: list[str],
    env: dict[str, str] | None = None,
    signal_on: str | None = None,
    sig: int = signal.SIGTERM,
    cwd: Path | None = None,
) -> Finished:
    """python args...; when a stdout line starts with the word(s) `signal_on`, send `sig` to the
    process group.

    The whole group gets the signal, as the contract says (a workload's children too).
    """
    full_env = {**os.environ, **(env or {})}
    proc = subprocess.Popen(
        [sys.executable, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=full_env,
        cwd=cwd,
        start_new_session=True,
    )
    watchdog = threading.Timer(WATCHDOG_S, lambda: os.killpg(proc.pid, signal.SIGKILL))
    watchdog.start()
    lines: list[str] = []
    sent = False
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if not sent and signal_on is not None and _matches(line, signal_on):
                os.killpg(proc.pid, sig)
                sent = True
        returncode = proc.wait()
    finally:
        watchdog.cancel()
    if signal_on is not None and not sent:
        raise AssertionError(f"never saw {signal_on!r}; output:\n{''.join(lines)[-4000:]}")
    return Finished(returncode, lines)


def _matches(line: str, wanted: str) -> bool:
    """`step 7` matches the lines `step 7` and `step 7 loss 3.2`, not `step 70`."""
    stripped = line.strip()
    return stripped == wanted or stripped.startswith(wanted + " ")
