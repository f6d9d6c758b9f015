"""Atomic, verified checkpoints on the volume, and the rules for when to take them.

Layout under `directory`:
    step-000000004200/          a complete checkpoint: the payload plus MARKER_NAME
    .tmp-step-000000004300-ab12  a checkpoint being written (or the leftover of a crash)

A save writes the payload into a temp directory, fsyncs it, writes a marker holding a checksum
of the content, and only then renames the directory into place (and fsyncs the parent). A
reader only accepts a `step-*` directory whose marker parses and whose checksum matches the
content, so a SIGKILL, a full disk or a torn write can never make us resume from half a state.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from lowcostgpu.sdk.durable import atomic_write_bytes, fsync_dir, fsync_tree, tree_checksum
from lowcostgpu.sdk.env import DEFAULT_GRACE_PERIOD_S
from lowcostgpu.sdk.interval import IntervalPolicy
from lowcostgpu.sdk.metadata import MetadataClient
from lowcostgpu.sdk.notice import StopNotice, default_notice

log = logging.getLogger("lowcostgpu.sdk")

MARKER_NAME = "_LOWCOSTGPU_COMPLETE.json"
_STEP_DIR = re.compile(r"^step-(\d{12})$")
T = TypeVar("T")


@dataclass(frozen=True)
class CheckpointInfo:
    step: int
    path: Path
    checksum: str
    files: int
    size_bytes: int
    created_at: float  # wall-clock seconds since the epoch, from the marker


def step_dir_name(step: int) -> str:
    if step < 0:
        raise ValueError(f"checkpoint step must be 0 or more, got {step}")
    return f"step-{step:012d}"


def read_marker(
    path: Path, verify: bool = True, verify_checksum: bool = True
) -> CheckpointInfo | None:
    """The checkpoint in `path` if it is complete (and, with verify, intact); else None."""
    match = _STEP_DIR.match(path.name)
    if match is None:
        return None
    try:
        marker = json.loads((path / MARKER_NAME).read_text())
        info = CheckpointInfo(
            step=int(marker["step"]),
            path=path,
            checksum=str(marker["checksum"]),
            files=int(marker["files"]),
            size_bytes=int(marker["size_bytes"]),
            created_at=float(marker["created_at"]),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if info.step != int(match.group(1)):
        return None
    if verify and not _content_matches(info, checksum=verify_checksum):
        log.warning("lowcostgpu: ignoring %s: its content does not match its marker", path)
        return None
    return info


def _content_matches(info: CheckpointInfo, checksum: bool) -> bool:
    """Recompute the checksum (reads every byte), or only compare file count and total size."""
    if checksum:
        found = tree_checksum(info.path, exclude=frozenset({MARKER_NAME}))
        return found == (info.checksum, info.files, info.size_bytes)
    sizes = [
        p.stat().st_size for p in info.path.rglob("*") if p.is_file() and p.name != MARKER_NAME
    ]
    return (len(sizes), sum(sizes)) == (info.files, info.size_bytes)


class Checkpointer:
    """Saves, finds and prunes checkpoints; decides when one is due; reports them."""

    def __init__(
        self,
        directory: str | Path,
        keep_last: int = 3,
        every_steps: int | None = None,
        every_s: float | None = None,
        adaptive: bool = False,
        metadata: MetadataClient | None = None,
        notice: StopNotice | None = None,
        clock: Callable[[], float] = time.monotonic,
        min_interval_s: float = 30.0,
        max_interval_s: float = 3600.0,
        verify_checksum: bool = True,
        saves_on_notice: bool | None = None,
        grace_period_s: float = DEFAULT_GRACE_PERIOD_S,
    ) -> None:
        """verify_checksum=False: trust file count and sizes on load instead of re-reading every
        byte (a full read costs about 1 s per GB here; worth skipping for very large states).

        Each report says how long the save took (`save_s`, measured here: write, fsync, marker,
        rename — what a save at a notice must finish before the deadline) and whether this
        workload saves when a notice comes (`saves_on_notice`). The control plane charges a
        workload that does so its save time, not the work since its last checkpoint, when it
        chooses whom to reclaim. saves_on_notice=None infers it: true once the loop has asked
        `should_stop()` with the SIGTERM handler installed (the documented loop saves when it
        answers true); pass False if the loop exits without saving at a notice, True if it saves
        by other means. `grace_period_s` (the contract's LOWCOSTGPU_GRACE_PERIOD_S; `WorkloadEnv`
        has it) tells `early_save_due` whether a save at the notice fits."""
        if keep_last < 1:
            raise ValueError(f"keep_last must be at least 1, got {keep_last}")
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.keep_last = keep_last
        self.verify_checksum = verify_checksum
        self.metadata = metadata if metadata is not None else MetadataClient(None, None)
        self.notice = notice if notice is not None else default_notice()
        self._clock = clock
        self.policy = IntervalPolicy(
            every_steps=every_steps,
            every_s=every_s,
            adaptive=adaptive,
            fleet_source=self.metadata.fleet if self.metadata.enabled else None,
            clock=clock,
            min_interval_s=min_interval_s,
            max_interval_s=max_interval_s,
        )
        self._pending: Future[CheckpointInfo] | None = None
        self._saves_on_notice = saves_on_notice
        self._polled_notice = False
        self.grace_period_s = grace_period_s
        self._last_save_s: float | None = None
        self._remove_leftovers()

    # ---- reading -------------------------------------------------------------------------
    def checkpoints(self, verify: bool = False) -> list[CheckpointInfo]:
        """Complete checkpoints, oldest first (verify=True also recomputes each checksum)."""
        found = []
        for path in self.directory.iterdir():
            if path.is_dir() and _STEP_DIR.match(path.name):
                info = read_marker(path, verify=verify)
                if info is not None:
                    found.append(info)
        return sorted(found, key=lambda info: info.step)

    def latest(self) -> CheckpointInfo | None:
        """The newest complete and intact checkpoint, or None."""
        for info in reversed(self.checkpoints(verify=False)):
            verified = read_marker(info.path, verify_checksum=self.verify_checksum)
            if verified is not None:
                return verified
        return None

    def load_latest(self, read_fn: Callable[[Path], T]) -> tuple[CheckpointInfo, T] | None:
        """read_fn(path) of the newest intact checkpoint; falls back to older ones if it fails.

        Also tells the interval policy where we resumed, so `every_steps` counts from there.
        """
        errors: list[BaseException] = []
        for info in reversed(self.checkpoints(verify=False)):
            verified = read_marker(info.path, verify_checksum=self.verify_checksum)
            if verified is None:
                continue
            try:
                value = read_fn(verified.path)
            except Exception as error:
                log.warning("lowcostgpu: could not load %s (%s); trying an older one", info, error)
                errors.append(error)
                continue
            self.policy.resume_from(verified.step)
            return verified, value
        if errors:
            raise errors[0]
        return None

    # ---- writing -------------------------------------------------------------------------
    def due(self, step: int) -> bool:
        return self.policy.due(step)

    def should_stop(self) -> bool:
        """True once a notice came: save now (`save`) and exit with EXIT_INTERRUPTED."""
        self._polled_notice = True
        return self.notice.requested

    def early_save_due(self) -> bool:
        """True once per preemption-risk warning (`StopNotice.early_save_due`): save now, with
        the loop's usual save, so that a reclaim, if it comes, finds little to lose. False when
        the loop saves at the notice and its last save fits in the grace period: a reclaim
        would then lose nothing anyway, and an early save would only cost its time (in the
        simulator, saving at every warning cost more GPU time than it saved: docs/simulation.md,
        *Warnings*)."""
        if not self.notice.early_save_due():
            return False
        last = self._last_save_s
        return not (self.saves_on_notice and last is not None and last <= self.grace_period_s)

    @property
    def saves_on_notice(self) -> bool:
        """What the reports say: given, or inferred (the loop polls an installed notice)."""
        if self._saves_on_notice is not None:
            return self._saves_on_notice
        return self._polled_notice and self.notice.installed

    def save(self, step: int, write_fn: Callable[[Path], object]) -> CheckpointInfo:
        """Write a checkpoint of `step` with write_fn(tmp_dir) and make it durable; blocking."""
        self.wait()
        started = self._clock()
        tmp = self._write_payload(step, write_fn)
        info = self._commit(step, tmp)
        cost_s = self._clock() - started
        self.policy.record_save(step, cost_s)
        self._after_save(info, blocking_s=cost_s, total_s=cost_s)
        return info

    def save_async(self, step: int, write_fn: Callable[[Path], object]) -> Future[CheckpointInfo]:
        """Like save, but only the staging part of write_fn blocks the caller.

        write_fn(tmp_dir) runs on the caller's thread and may return a callable (the deferred
        write, run in the background) or a Future (e.g. from torch.distributed.checkpoint's
        async_save, awaited in the background). Marker, rename, prune and report follow in the
        background. One save is in flight at a time: the next save waits for the previous one.
        """
        self.wait()
        started = self._clock()
        tmp = self.directory / f".tmp-{step_dir_name(step)}-{uuid.uuid4().hex[:8]}"
        tmp.mkdir()
        try:
            deferred = write_fn(tmp)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        blocking_s = self._clock() - started
        # Count the interval from now, not from when the write lands, or every step until then
        # would look due (and wait for this save).
        self.policy.record_save(step, blocking_s)
        future: Future[CheckpointInfo] = Future()
        thread = threading.Thread(
            target=self._finish_async,
            args=(step, tmp, deferred, future, started, blocking_s),
            name=f"lowcostgpu-ckpt-{step}",
            daemon=False,
        )
        self._pending = future
        thread.start()
        return future

    def wait(self) -> CheckpointInfo | None:
        """Block until an in-flight async save is durable; re-raises its error, if any."""
        pending, self._pending = self._pending, None
        return pending.result() if pending is not None else None

    def finish(self, step: int | None = None) -> bool:
        """The run is done on purpose: wait for saves, then report complete (a success)."""
        self.wait()
        return self.metadata.report_complete(step)

    # ---- internals -----------------------------------------------------------------------
    def _write_payload(self, step: int, write_fn: Callable[[Path], object]) -> Path:
        tmp = self.directory / f".tmp-{step_dir_name(step)}-{uuid.uuid4().hex[:8]}"
        tmp.mkdir()
        try:
            write_fn(tmp)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return tmp

    def _finish_async(
        self,
        step: int,
        tmp: Path,
        deferred: object,
        future: Future[CheckpointInfo],
        started: float,
        blocking_s: float,
    ) -> None:
        try:
            result = getattr(deferred, "result", None)
            if callable(result):
                result()
            elif callable(deferred):
                deferred()
            info = self._commit(step, tmp)
            self._after_save(info, blocking_s=blocking_s, total_s=self._clock() - started)
        except BaseException as error:
            shutil.rmtree(tmp, ignore_errors=True)
            log.error("lowcostgpu: async checkpoint of step %d failed: %s", step, error)
            future.set_exception(error)
        else:
            future.set_result(info)

    def _commit(self, step: int, tmp: Path) -> CheckpointInfo:
        """fsync payload, write the marker, rename into place, fsync the parent."""
        try:
            fsync_tree(tmp)
            checksum, files, size = tree_checksum(tmp, exclude=frozenset({MARKER_NAME}))
            marker: dict[str, Any] = {
                "step": step,
                "checksum": checksum,
                "files": files,
                "size_bytes": size,
                "created_at": time.time(),
            }
            atomic_write_bytes(tmp / MARKER_NAME, json.dumps(marker).encode())
            final = self.directory / step_dir_name(step)
            self._replace_dir(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return CheckpointInfo(step, final, checksum, files, size, marker["created_at"])

    def _replace_dir(self, tmp: Path, final: Path) -> None:
        old = None
        if final.exists():  # the same step saved twice (e.g. right after a resume)
            old = self.directory / f".tmp-old-{final.name}-{uuid.uuid4().hex[:8]}"
            final.rename(old)
        tmp.rename(final)
        fsync_dir(self.directory)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)

    def _after_save(self, info: CheckpointInfo, blocking_s: float, total_s: float) -> None:
        self._last_save_s = total_s
        self._prune()
        self.metadata.report_checkpoint(
            info.step,
            path=str(info.path),
            duration_s=round(total_s, 6),
            blocking_s=round(blocking_s, 6),
            size_bytes=info.size_bytes,
            save_s=round(total_s, 6),
            saves_on_notice=self.saves_on_notice,
        )

    def _prune(self) -> None:
        """Keep the newest keep_last complete checkpoints; drop older ones (complete or not)."""
        complete = self.checkpoints(verify=False)
        kept = complete[-self.keep_last :]
        if not kept:
            return
        oldest_kept = kept[0].step
        for path in self.directory.iterdir():
            match = _STEP_DIR.match(path.name)
            if match and int(match.group(1)) < oldest_kept:
                shutil.rmtree(path, ignore_errors=True)

    def _remove_leftovers(self) -> None:
        """Temp directories left by a crashed earlier run are never complete: remove them."""
        for path in self.directory.glob(".tmp-*"):
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
