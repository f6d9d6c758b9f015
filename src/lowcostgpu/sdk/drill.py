"""Interruption drill: run a workload, interrupt it like the control plane would, restart it.

Before trusting a job to interruptible capacity, run it through a drill: SIGTERM to the whole
process group at chosen points (the notice), a SIGKILL (the deadline passed), restarts with the
same volume and LOWCOSTGPU_RESTART_COUNT incremented; then compare its outputs with an
uninterrupted run. The template tests use exactly this.

    runs = drill(argv, volume, plan=[(40, signal.SIGTERM), (90, signal.SIGKILL)],
                 progress=re.compile(r"^step (\\d+) "))
"""

from __future__ import annotations

import contextlib
import os
import queue
import re
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from lowcostgpu.sdk.notice import EXIT_INTERRUPTED

DEFAULT_TIMEOUT_S = 180.0


class DrillError(AssertionError):
    """The workload did not behave as the contract asks (died, hung, or finished too early)."""


@dataclass
class Run:
    restart_count: int
    returncode: int
    lines: list[str] = field(default_factory=list)
    signal_sent: int | None = None
    signalled_at: int | None = None  # the progress value that triggered the signal
    signal_to_exit_s: float | None = None


def workload_env(
    volume: Path, restart_count: int, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOWCOSTGPU_")}
    env.update(
        {
            "LOWCOSTGPU_VOLUME": str(volume),
            "LOWCOSTGPU_RESTART_COUNT": str(restart_count),
            "LOWCOSTGPU_INSTANCE_ID": "drill",
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.update(extra or {})
    return env


def run_once(
    argv: Sequence[str],
    env: Mapping[str, str],
    progress: re.Pattern[str] | None = None,
    signal_at: int | None = None,
    sig: int = signal.SIGTERM,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> Run:
    """Start argv in its own process group; signal the group once progress reaches signal_at."""
    restart = int(env.get("LOWCOSTGPU_RESTART_COUNT", "0"))
    child = subprocess.Popen(
        list(argv),
        env=dict(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    lines: queue.Queue[str | None] = queue.Queue()
    threading.Thread(target=_pump, args=(child, lines), daemon=True).start()
    run = Run(restart_count=restart, returncode=0)
    deadline = time.monotonic() + timeout_s
    try:
        signalled = _follow(child, lines, run, deadline, progress, signal_at, sig)
        run.returncode = child.wait(timeout=max(1.0, deadline - time.monotonic()))
        if signalled is not None:
            run.signal_to_exit_s = time.monotonic() - signalled
    finally:
        _kill_group(child)
    if signal_at is not None and signalled is None:
        raise DrillError(f"the workload ended before reaching {signal_at}: {run.lines[-5:]}")
    return run


def _follow(
    child: subprocess.Popen[str],
    lines: queue.Queue[str | None],
    run: Run,
    deadline: float,
    progress: re.Pattern[str] | None,
    signal_at: int | None,
    sig: int,
) -> float | None:
    """Collect output until EOF; signal the group once; return when the signal was sent."""
    signalled = None
    while (line := _next_line(lines, deadline, child)) is not None:
        run.lines.append(line)
        if signal_at is None or signalled is not None or progress is None:
            continue
        match = progress.search(line)
        if match and int(match.group(1)) >= signal_at:
            os.killpg(child.pid, sig)
            signalled = time.monotonic()
            run.signal_sent, run.signalled_at = sig, int(match.group(1))
    return signalled


def drill(
    argv: Sequence[str],
    volume: Path,
    plan: Sequence[tuple[int, int]],
    progress: re.Pattern[str],
    extra_env: Mapping[str, str] | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> list[Run]:
    """Interrupt per plan [(progress value, signal), ...], then let the last restart finish."""
    runs = []
    for restart, (at, sig) in enumerate(plan):
        env = workload_env(volume, restart, extra_env)
        run = run_once(argv, env, progress, signal_at=at, sig=sig, timeout_s=timeout_s)
        _check_interrupted(run)
        runs.append(run)
    final = run_once(argv, workload_env(volume, len(plan), extra_env), timeout_s=timeout_s)
    if final.returncode != 0:
        raise DrillError(f"the final run failed ({final.returncode}): {final.lines[-10:]}")
    runs.append(final)
    return runs


def _check_interrupted(run: Run) -> None:
    if run.signal_sent == signal.SIGKILL:
        if run.returncode != -signal.SIGKILL:
            raise DrillError(f"expected death by SIGKILL, got exit {run.returncode}")
        return
    if run.returncode not in (0, EXIT_INTERRUPTED):
        raise DrillError(
            f"after SIGTERM the workload exited {run.returncode} (expected {EXIT_INTERRUPTED} "
            f"or 0 after saving its checkpoint): {run.lines[-10:]}"
        )


def _pump(child: subprocess.Popen[str], lines: queue.Queue[str | None]) -> None:
    assert child.stdout is not None
    for line in child.stdout:
        lines.put(line.rstrip("\n"))
    lines.put(None)


def _next_line(
    lines: queue.Queue[str | None], deadline: float, child: subprocess.Popen[str]
) -> str | None:
    try:
        return lines.get(timeout=max(0.0, deadline - time.monotonic()))
    except queue.Empty:
        _kill_group(child)
        raise DrillError(
            "the workload did not exit within the drill's timeout (ignored SIGTERM?)"
        ) from None


def _kill_group(child: subprocess.Popen[str]) -> None:
    """Leave nothing behind: the group may still hold DataLoader workers."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.pid, signal.SIGKILL)
    child.wait()
