"""The local runtime: each workload is a real process group on this machine, run by a shim.

Layout of `state_dir` (all of it survives a crash of the control plane; see `shim.py`):

    <allocation_id>/   spec.json, lock, shim.json, workload.json, exit.json | start_failed.json,
                       work/ (the working directory when the workload has no volume)
    .logs/<allocation_id>.log   stdout + stderr (kept after `forget`, so a failure can be read)
    .claims/           directories being prepared by `start`, renamed into place when complete

`start` is idempotent and race-free: the claim directory (with its spec and its lock already
taken) is renamed onto `<allocation_id>/`, which fails if another start won. A server killed
between the claim and the launch of the shim leaves a claim whose lock nobody holds; the next
`start` of that allocation (the outbox retries it) launches the shim then.

The workload's environment is `INHERITED_ENV` taken from the server (not all of it: the server's
secrets stay out of customer code), then `WorkloadStart.env`, then `CUDA_VISIBLE_DEVICES` (the
allocation's GPU indices, comma-separated; empty for none) and `LOWCOSTGPU_VOLUME` (the volume's
mount path, also the working directory, when there is a volume).

With a `SandboxPolicy` (what `serve` uses unless `--no-sandbox`), each workload runs in a bwrap
sandbox as its account's own uid, seeing only its volume or working directory (both owned by that
uid, mode 0700), a private /tmp, the system read-only and its GPUs (sandbox.py); HOME and TMPDIR
are /tmp there. Signals, exit codes, logs and restarts behave as without it.

`observe` reads every allocation's files (O(workloads) file reads a poll). `changes_since`
(`ports.runtime.ChangeReporting`) pays for what changed instead: an exit is an event, not a poll
result — each running workload's shim is watched through a pidfd in one epoll set
(`changes.ShimWatch`), and only the allocations whose shim ended, the ones still starting, the
ones started or forgotten since, and any the watch could not take are read again.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import secrets
import shutil
import signal as signals
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

from lowcostgpu.adapters.local import shim
from lowcostgpu.adapters.local.changes import Changes
from lowcostgpu.adapters.local.sandbox import SandboxPolicy, SandboxUsers, own_tree, sandbox_run
from lowcostgpu.adapters.local.state import (
    check_allocation_id,
    report,
    shim_alive,
)
from lowcostgpu.domain.errors import Conflict, InvalidRequest, NotFound
from lowcostgpu.ports.runtime import WorkloadReport, WorkloadStart, check_command

INHERITED_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "USER", "LOGNAME")
SHIM_PATH = Path(shim.__file__).resolve()
_CLAIM_MAX_AGE_S = 3600
_START_WAIT_S = 2.0  # how long a signal waits for a shim that has not spawned its workload yet


class LocalRuntime:
    """`Runtime` on this machine. Any number of instances may read the same `state_dir`."""

    def __init__(
        self,
        state_dir: Path | str,
        *,
        base_env: Mapping[str, str] | None = None,
        sandbox: SandboxPolicy | None = None,
    ) -> None:
        self._dir = Path(state_dir).resolve()
        self._logs = self._dir / ".logs"
        self._claims = self._dir / ".claims"
        for path in (self._dir, self._logs, self._claims):
            path.mkdir(parents=True, exist_ok=True)
        self._base_env = dict(base_env) if base_env is not None else _inherited_env()
        self._shims: dict[str, subprocess.Popen[bytes]] = {}  # ours to reap: no defunct shims
        self._sweep_at = _SWEEP_MIN_SHIMS  # a start sweeps `_shims` once they reach this many
        self._sandbox = sandbox
        if sandbox is not None and str(self._dir) not in sandbox.hidden:
            self._sandbox = replace(sandbox, hidden=(*sandbox.hidden, str(self._dir)))
        self._users = SandboxUsers(self._dir)
        self._changes = Changes(self._dir, self._shim_pid)
        self._drop_stale_claims()

    @property
    def state_dir(self) -> Path:
        return self._dir

    @property
    def sandboxed(self) -> bool:
        return self._sandbox is not None

    def gang_address(self, gang_id: str, master_host_id: str) -> str:
        """Where a gang's members reach the rank-0 member: every local host is this machine."""
        return "127.0.0.1"

    def start(self, start: WorkloadStart) -> None:
        check_allocation_id(start.allocation_id)
        check_command(start)
        self._reap_if_grown()
        alloc_dir = self._dir / start.allocation_id
        if alloc_dir.exists():
            self._relaunch_if_abandoned(alloc_dir)
            return
        claim = self._claims / f"{start.allocation_id}.{os.getpid()}.{secrets.token_hex(4)}"
        claim.mkdir()
        (claim / "work").mkdir()
        spec = self._spec(start, alloc_dir)
        if self._sandbox is not None:
            own_tree(claim / "work", spec["sandbox"]["uid"])
        shim.write_json_atomic(claim / shim.SPEC_RECORD, spec)
        lock_fd = os.open(claim / shim.LOCK_FILE, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX)  # held before the rename: nobody relaunches it
            try:
                os.rename(claim, alloc_dir)
            except OSError as exc:
                if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                    raise
                shutil.rmtree(claim, ignore_errors=True)  # another start won the race
                return
            _fsync_dir(self._dir)
            self._launch(alloc_dir, lock_fd)
        finally:
            os.close(lock_fd)
        self._changes.look_again(start.allocation_id)

    def signal(self, allocation_id: str, signal: Literal["SIGTERM"]) -> None:
        if signal != "SIGTERM":
            raise InvalidRequest(f"signal {signal!r} is not supported", hint="send 'SIGTERM'")
        self._signal_group(allocation_id, signals.SIGTERM)

    def kill(self, allocation_id: str) -> None:
        self._signal_group(allocation_id, signals.SIGKILL)

    def observe(self) -> list[WorkloadReport]:
        self._reap()
        reports = []
        for entry in sorted(os.scandir(self._dir), key=lambda e: e.name):
            if entry.name.startswith(".") or not entry.is_dir():
                continue
            found = report(Path(entry.path))
            if found is not None:
                reports.append(found)
        return reports

    def changes_since(self, cursor: int | None) -> tuple[list[WorkloadReport], int]:
        if cursor is None:
            reports = self.observe()
            return reports, self._changes.seen_all(reports)
        reaped = self._changes.refresh()
        for allocation_id in reaped:  # their shims ended: reap ours now, not at an O(n) sweep
            proc = self._shims.get(allocation_id)
            if proc is not None and proc.poll() is not None:
                self._shims.pop(allocation_id, None)
        return self._changes.since(cursor)

    def _shim_pid(self, allocation_id: str) -> int | None:
        """The pid of the allocation's shim: ours, or the one its record names."""
        proc = self._shims.get(allocation_id)
        if proc is not None:
            return proc.pid
        record = shim.read_json(self._dir / allocation_id / shim.SHIM_RECORD)
        pid = None if record is None else record.get("pid")
        return pid if isinstance(pid, int) else None

    def forget(self, allocation_id: str) -> None:
        """Drop an ended workload's state (its log stays); refuse while anything of it runs."""
        check_allocation_id(allocation_id)
        alloc_dir = self._dir / allocation_id
        found = report(alloc_dir)
        if found is None:
            return
        if found.phase not in ("exited", "start_failed") and (
            found.phase == "running" or shim_alive(alloc_dir)
        ):
            raise Conflict(
                f"workload {allocation_id} is still {found.phase}; it cannot be forgotten yet",
                hint="signal or kill it, and forget it once observe() reports it exited",
            )
        proc = self._shims.get(allocation_id)  # reaped now if it has ended (O(1), not a sweep)
        if proc is not None and proc.poll() is not None:
            self._shims.pop(allocation_id, None)
        shutil.rmtree(alloc_dir, ignore_errors=True)
        self._changes.forgotten(allocation_id)

    def logs(self, allocation_id: str, tail_bytes: int = 65536) -> str:
        check_allocation_id(allocation_id)
        try:
            with open(self._log_path(allocation_id), "rb") as f:
                size = f.seek(0, os.SEEK_END)
                f.seek(max(0, size - max(0, tail_bytes)))
                return f.read().decode("utf-8", errors="replace")
        except FileNotFoundError:
            if (self._dir / allocation_id).exists():
                return ""
            raise NotFound(f"no workload {allocation_id} on this runtime") from None

    # -- internals -------------------------------------------------------------------------

    def _log_path(self, allocation_id: str) -> Path:
        return self._logs / f"{allocation_id}.log"

    def _spec(self, start: WorkloadStart, alloc_dir: Path) -> dict[str, Any]:
        env = {**self._base_env, **start.env}
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in start.gpu_indices)
        cwd = str(alloc_dir / "work")
        if start.volume is not None:
            env["LOWCOSTGPU_VOLUME"] = cwd = start.volume.path
        box = None
        if self._sandbox is not None:
            uid = self._users.uid(start.account_id or f"instance:{start.instance_id}")
            if start.volume is not None:
                own_tree(Path(cwd), uid)
            run = sandbox_run(self._sandbox, uid, cwd, start.gpu_indices, start.allocation_id)
            env.update(CUDA_VISIBLE_DEVICES=run.cuda_visible_devices, HOME="/tmp", TMPDIR="/tmp")
            box = run.to_json()
        return {
            "instance_id": start.instance_id,
            "host_id": start.host_id,
            "restart_count": start.restart_count,
            "argv": list(start.argv),
            "env": env,
            "cwd": cwd,
            "log_path": str(self._log_path(start.allocation_id)),
            "at": time.time(),
            **({"sandbox": box} if box is not None else {}),
        }

    def _launch(self, alloc_dir: Path, lock_fd: int) -> None:
        """Start the shim in a session of its own, handing it the allocation's lock."""
        with open(self._log_path(alloc_dir.name), "ab") as log:
            proc = subprocess.Popen(
                [sys.executable, "-I", str(SHIM_PATH), str(alloc_dir), str(lock_fd)],
                pass_fds=(lock_fd,),
                start_new_session=True,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                cwd=alloc_dir,
            )
        self._shims[alloc_dir.name] = proc

    def _relaunch_if_abandoned(self, alloc_dir: Path) -> None:
        """Launch the shim of a claim whose starter died before launching it; else nothing."""
        try:
            lock_fd = os.open(alloc_dir / shim.LOCK_FILE, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            return
        try:
            if not _try_lock(lock_fd) or (alloc_dir / shim.SHIM_RECORD).exists():
                return  # a shim runs (or ran): the workload was started
            self._launch(alloc_dir, lock_fd)
        finally:
            os.close(lock_fd)

    def _signal_group(self, allocation_id: str, signum: int) -> None:
        check_allocation_id(allocation_id)
        alloc_dir = self._dir / allocation_id
        workload = _await_workload(alloc_dir)
        if workload is None or not _owns_group(alloc_dir, workload):
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(int(workload["pid"]), signum)

    def _reap(self) -> None:
        for allocation_id, proc in list(self._shims.items()):
            if proc.poll() is not None:
                self._shims.pop(allocation_id, None)  # another thread may have reaped it

    def _reap_if_grown(self) -> None:
        """A start's share of reaping, amortised O(1): ended shims are reaped as the loop sees
        them end (`changes_since`, `observe`); a start sweeps them all only when they have doubled
        since the last sweep, so that shims nobody watched never pile up unreaped, without a
        sweep of every workload at each start (at 10,000 workloads ~10 ms a start)."""
        if len(self._shims) < self._sweep_at:
            return
        self._reap()
        self._sweep_at = max(_SWEEP_MIN_SHIMS, 2 * len(self._shims))

    def _drop_stale_claims(self) -> None:
        cutoff = time.time() - _CLAIM_MAX_AGE_S
        for entry in os.scandir(self._claims):
            if entry.stat().st_mtime < cutoff:
                shutil.rmtree(entry.path, ignore_errors=True)


_SWEEP_MIN_SHIMS = 64  # a start sweeps ended shims only once it holds this many (or twice the last)


def _inherited_env() -> dict[str, str]:
    return {name: os.environ[name] for name in INHERITED_ENV if name in os.environ}


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _try_lock(fd: int, attempts: int = 5) -> bool:
    """Take the lock if nobody keeps it; an observer's brief shared lock is waited out."""
    for attempt in range(attempts):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if attempt + 1 < attempts:
                time.sleep(0.005)
    return False


def _await_workload(alloc_dir: Path) -> dict[str, Any] | None:
    """The workload record; while a live shim has not spawned it yet, wait for it a little."""
    deadline = time.monotonic() + _START_WAIT_S
    while True:
        record = shim.read_json(alloc_dir / shim.WORKLOAD_RECORD)
        if record is not None or not alloc_dir.exists():
            return record
        ended = (alloc_dir / shim.START_FAILED_RECORD).exists() or not shim_alive(alloc_dir)
        if ended or time.monotonic() > deadline:
            return None
        time.sleep(0.01)


def _owns_group(alloc_dir: Path, workload: dict[str, Any]) -> bool:
    """Is process group `pid` still this workload's? Guards a signal against pid reuse.

    While the leader lives (or is an unreaped zombie) its start time decides. Once it is gone, the
    kernel does not reuse a pid that still names a process group, so remaining members are ours —
    unless the exit is recorded: the shim then already killed the group, and the id may be reused.
    """
    pid = int(workload["pid"])
    ticks = shim.process_start_ticks(pid, zombie_too=True)
    if ticks is not None:
        return ticks == workload.get("start_ticks")
    return not (alloc_dir / shim.EXIT_RECORD).exists()
