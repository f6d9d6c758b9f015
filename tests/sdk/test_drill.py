"""The drill itself must catch workloads that break the contract, or it proves nothing."""

from __future__ import annotations

import re
import signal
import sys
import textwrap
from pathlib import Path

import pytest

from lowcostgpu.sdk.drill import DrillError, drill, run_once, workload_env

PROGRESS = re.compile(r"^item (\d+)$")


def workload(on_sigterm: str, items: int = 200) -> list[str]:
    """A tiny job counting items on the volume; `on_sigterm` is 'exit0', 'exit1' or 'ignore'."""
    script = textwrap.dedent(
        f"""
        import os, signal, sys, time
        from pathlib import Path
        stop = []
        if {on_sigterm!r} == "ignore":
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        else:
            signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
        state = Path(os.environ["LOWCOSTGPU_VOLUME"]) / "count"
        start = int(state.read_text()) if state.exists() else 0
        for i in range(start, {items}):
            if stop:
                state.write_text(str(i))
                sys.exit(0 if {on_sigterm!r} == "exit0" else 1)
            print(f"item {{i}}", flush=True)
            time.sleep(0.01)
        """
    )
    return [sys.executable, "-c", script]


def test_a_well_behaved_job_passes_and_resumes(tmp_path: Path) -> None:
    runs = drill(workload("exit0"), tmp_path, [(20, signal.SIGTERM)], PROGRESS)
    assert [r.returncode for r in runs] == [0, 0]
    assert runs[0].signal_to_exit_s is not None
    assert runs[1].restart_count == 1
    first_after = int(PROGRESS.match(runs[1].lines[0]).group(1))  # type: ignore[union-attr]
    assert first_after >= 20


def test_a_failing_exit_after_sigterm_is_reported(tmp_path: Path) -> None:
    with pytest.raises(DrillError, match="after SIGTERM the workload exited 1"):
        drill(workload("exit1"), tmp_path, [(10, signal.SIGTERM)], PROGRESS)


def test_a_job_that_ignores_sigterm_is_caught_by_the_timeout(tmp_path: Path) -> None:
    argv = workload("ignore", items=100_000)
    with pytest.raises(DrillError, match="did not exit within"):
        run_once(argv, workload_env(tmp_path, 0), PROGRESS, signal_at=5, timeout_s=2.0)


def test_a_job_that_ends_before_the_signal_point_is_reported(tmp_path: Path) -> None:
    with pytest.raises(DrillError, match="ended before reaching 500"):
        run_once(workload("exit0", items=5), workload_env(tmp_path, 0), PROGRESS, signal_at=500)


def test_sigkill_is_expected_to_kill(tmp_path: Path) -> None:
    runs = drill(workload("exit0"), tmp_path, [(10, signal.SIGKILL)], PROGRESS)
    assert runs[0].returncode == -signal.SIGKILL
    assert runs[1].returncode == 0
