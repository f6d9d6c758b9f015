"""A signal delivered on every line of a wait in turn, in a child process.

Python runs a signal handler between two bytecodes of the main thread, possibly while that thread
holds a lock the handler takes; a race that CI hits once in thousands of runs. A trace function
sends the signal on the k-th line run inside `threading` during the wait, for every k, so the
handler lands inside each lock-holding stretch at least once: a handler that locks hangs.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import os, signal, sys, threading

    def signal_at_line(k, wait, woke):
        seen = [0]

        def lines(frame, event, arg):
            if event == "line":
                seen[0] += 1
                if seen[0] == k:
                    os.kill(os.getpid(), signal.{signal_name})
            return lines

        def calls(frame, event, arg):
            return lines if frame.f_code.co_filename == threading.__file__ else None

        sys.settrace(calls)
        try:
            while seen[0] < k:
                wait(0.001)
        finally:
            sys.settrace(None)
        assert woke(10.0), k

    {setup}
    print("all woke")
    """
)


def signal_on_every_line(
    setup: str, signal_name: str = "SIGTERM"
) -> subprocess.CompletedProcess[str]:
    """Run `setup` (Python that calls `signal_at_line(k, wait, woke)` for k in 1..n) in a child;
    a hang shows as a timeout, reported with its stderr."""
    script = SCRIPT.replace("{signal_name}", signal_name).replace("{setup}", textwrap.dedent(setup))
    try:
        return subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
        )
    except subprocess.TimeoutExpired as expired:
        raise AssertionError(
            f"the child hung (a handler waited on a lock): {expired.stderr!r}"
        ) from None
