"""Reading an allocation's state directory back into a level-triggered report.

The files are written by the server (`spec.json`, at start) and by the shim (the rest, see
`shim.py`); this module only reads them, plus two facts of the live system: is the shim alive (its
`flock` is held) and is the workload's main process alive (pid and `/proc` start time match).

A shim killed with SIGKILL (rare) cannot record the exit. Its workload is then reported `running`
while it lives and afterwards `exited` with `exit_code=None` — "exit status unknown", which the core
already treats as a failure without a code — so that no workload stays `running` forever.
"""

from __future__ import annotations

import fcntl
import os
import re
from pathlib import Path

from lowcostgpu.adapters.local.shim import (
    EXIT_RECORD,
    LOCK_FILE,
    SHIM_RECORD,
    SPEC_RECORD,
    START_FAILED_RECORD,
    WORKLOAD_RECORD,
    process_start_ticks,
    read_json,
)
from lowcostgpu.domain.errors import InvalidRequest
from lowcostgpu.ports.runtime import WorkloadReport

_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9@.:_-]{0,127}")  # e.g. the core's "i-3f2a@1700000000"

UNKNOWN_EXIT_REASON = "exit status unknown: the workload and its shim are gone without a record"
SHIM_DIED_REASON = "exit status unknown: the shim stopped while it was starting the workload"
RELAUNCH_REASON = "the control plane stopped during start; start() again launches the shim"


def check_allocation_id(allocation_id: str, runtime: str = "local") -> None:
    """Allocation ids name directories (and, on Slurm, jobs): refuse anything that could leave
    the state directory."""
    if not _ID.fullmatch(allocation_id):
        raise InvalidRequest(
            f"allocation id {allocation_id!r} is not valid for the {runtime} runtime",
            hint="use letters, digits and '@.:_-' (at most 128 characters, starting with a letter "
            "or a digit)",
        )


def shim_alive(alloc_dir: Path) -> bool:
    """True while some process holds the allocation's lock: its shim, or a server mid-start."""
    try:
        fd = os.open(alloc_dir / LOCK_FILE, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing drops the shared lock if we took it
    return False


def workload_alive(record: dict[str, object]) -> bool:
    """The recorded main process still runs, and it is the same process (not a reused pid)."""
    pid, ticks = record.get("pid"), record.get("start_ticks")
    if not isinstance(pid, int):
        return False
    now_ticks = process_start_ticks(pid)
    return now_ticks is not None and now_ticks == ticks


def _at(record: dict[str, object] | None) -> int | None:
    value = None if record is None else record.get("at")
    return int(value) if isinstance(value, int | float) else None


def _finished(alloc_id: str, instance_id: str, alloc_dir: Path) -> WorkloadReport | None:
    exit_record = read_json(alloc_dir / EXIT_RECORD)
    if exit_record is not None:
        code = exit_record.get("exit_code")
        return WorkloadReport(
            alloc_id,
            instance_id,
            "exited",
            exit_code=code if isinstance(code, int) else None,
            at=_at(exit_record),
        )
    failed = read_json(alloc_dir / START_FAILED_RECORD)
    if failed is not None:
        reason = str(failed.get("reason", "the workload could not be started"))
        return WorkloadReport(alloc_id, instance_id, "start_failed", reason=reason, at=_at(failed))
    return None


def report(alloc_dir: Path) -> WorkloadReport | None:
    """What is true now of the workload in `alloc_dir`; None when the directory is no workload."""
    spec = read_json(alloc_dir / SPEC_RECORD)
    if spec is None:
        return None
    alloc_id, instance_id = alloc_dir.name, str(spec.get("instance_id", ""))
    done = _finished(alloc_id, instance_id, alloc_dir)
    if done is not None:
        return done
    workload = read_json(alloc_dir / WORKLOAD_RECORD)
    if workload is not None and workload_alive(workload):
        return WorkloadReport(alloc_id, instance_id, "running", at=_at(workload))
    alive = shim_alive(alloc_dir)
    done = _finished(alloc_id, instance_id, alloc_dir)  # the shim may have finished meanwhile
    if done is not None:
        return done
    if workload is not None:
        if alive:  # the main process just ended; the shim is writing its exit
            return WorkloadReport(alloc_id, instance_id, "running", at=_at(workload))
        return WorkloadReport(alloc_id, instance_id, "exited", reason=UNKNOWN_EXIT_REASON)
    if alive:
        return WorkloadReport(alloc_id, instance_id, "starting", at=_at(spec))
    if (alloc_dir / SHIM_RECORD).exists():
        return WorkloadReport(alloc_id, instance_id, "exited", reason=SHIM_DIED_REASON)
    return WorkloadReport(alloc_id, instance_id, "starting", reason=RELAUNCH_REASON, at=_at(spec))
