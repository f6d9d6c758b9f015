"""Per-item progress for batch jobs: every output written exactly once, whatever interrupts it.

For each item (or chunk of items): write its outputs atomically (temp file, fsync, rename), then
append a durable record to a progress log. On restart, recorded items are skipped; an item whose
output landed but whose record did not is simply redone — its atomic rewrite yields the same
bytes — so the outputs are byte-identical to an uninterrupted run. A torn last record (SIGKILL
mid-append) is discarded.

    progress = BatchProgress(volume / "out", fingerprint=sha256_of_input)
    for index, chunk in enumerate(chunks):
        key = f"chunk-{index}"
        if progress.is_done(key):
            continue
        if progress.should_stop():
            break  # exit 0: the notice came, everything done so far is durable
        progress.commit(key, {f"chunk_{index:05d}.npy": encode(chunk)})
    else:
        progress.finish()
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from lowcostgpu.sdk.durable import atomic_write_bytes, fsync_dir
from lowcostgpu.sdk.metadata import MetadataClient
from lowcostgpu.sdk.notice import StopNotice, default_notice

log = logging.getLogger("lowcostgpu.sdk")

PROGRESS_FILE = "_progress.jsonl"
MANIFEST_FILE = "_batch.json"


class BatchInputChanged(RuntimeError):
    """The job restarted with other input than the outputs on the volume were made from."""


class BatchProgress:
    """The progress log of one batch job in `directory` (outputs live there too)."""

    def __init__(
        self,
        directory: str | Path,
        fingerprint: str | None = None,
        metadata: MetadataClient | None = None,
        notice: StopNotice | None = None,
        report_every_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.metadata = metadata if metadata is not None else MetadataClient(None, None)
        self.notice = notice if notice is not None else default_notice()
        self._report_every_s = report_every_s
        self._clock = clock
        self._last_report: float | None = None
        self._check_fingerprint(fingerprint)
        self._remove_leftovers()
        self._done: dict[str, dict[str, int]] = self._load()

    @property
    def done_count(self) -> int:
        return len(self._done)

    def is_done(self, key: str) -> bool:
        return key in self._done

    def should_stop(self) -> bool:
        return self.notice.requested

    def commit(self, key: str, outputs: Mapping[str, bytes]) -> None:
        """Write each output atomically, then durably record `key` as done."""
        if key in self._done:
            raise ValueError(f"item {key!r} is already done; check is_done() before redoing it")
        sizes = {}
        for name, data in outputs.items():
            path = self._output_path(name)
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_bytes(path, data)
            sizes[name] = len(data)
        self._append({"key": key, "outputs": sizes})
        self._done[key] = sizes
        self._maybe_report()

    def run(self, items: Iterable[tuple[str, Callable[[], Mapping[str, bytes]]]]) -> bool:
        """Process (key, produce) pairs, skipping done ones; False if stopped by a notice."""
        for key, produce in items:
            if self.is_done(key):
                continue
            if self.should_stop():
                self.report()
                return False
            self.commit(key, produce())
        return True

    def report(self) -> bool:
        """Tell the metadata endpoint how many items are durable (our 'checkpoint step')."""
        self._last_report = self._clock()
        return self.metadata.report_checkpoint(
            self.done_count, path=str(self.directory), items_done=self.done_count
        )

    def finish(self) -> bool:
        """All items are done: report the last progress and completion (a success)."""
        self.report()
        return self.metadata.report_complete(self.done_count)

    # ---- internals -------------------------------------------------------------------------
    def _output_path(self, name: str) -> Path:
        path = (self.directory / name).resolve()
        if self.directory.resolve() not in path.parents or path.name.startswith(("_", ".tmp-")):
            raise ValueError(f"output name {name!r} must be a relative path inside the batch dir")
        return path

    def _append(self, record: Mapping[str, object]) -> None:
        path = self.directory / PROGRESS_FILE
        created = not path.exists()
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record, sort_keys=True) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        if created:
            fsync_dir(self.directory)

    def _load(self) -> dict[str, dict[str, int]]:
        """Read the log; drop a torn tail; forget items whose outputs are missing or short."""
        path = self.directory / PROGRESS_FILE
        if not path.exists():
            return {}
        raw = path.read_bytes()
        good_end = raw.rfind(b"\n") + 1
        if good_end != len(raw):
            log.warning("lowcostgpu: dropping a torn progress record (the job was killed)")
            with open(path, "r+b") as handle:
                handle.truncate(good_end)
                os.fsync(handle.fileno())
        done: dict[str, dict[str, int]] = {}
        for line in raw[:good_end].decode("utf-8", errors="replace").splitlines():
            try:
                record = json.loads(line)
                outputs = {str(k): int(v) for k, v in record["outputs"].items()}
            except (ValueError, KeyError, TypeError, AttributeError):
                log.warning("lowcostgpu: skipping an unreadable progress record: %r", line[:80])
                continue
            if all(self._intact(name, size) for name, size in outputs.items()):
                done[str(record["key"])] = outputs
            else:
                log.warning("lowcostgpu: output of %s is missing; redoing it", record["key"])
                done.pop(str(record["key"]), None)
        return done

    def _intact(self, name: str, size: int) -> bool:
        path = self.directory / name
        return path.is_file() and path.stat().st_size == size

    def _maybe_report(self) -> None:
        if not self.metadata.enabled:
            return
        now = self._clock()
        if self._last_report is None or now - self._last_report >= self._report_every_s:
            self.report()

    def _check_fingerprint(self, fingerprint: str | None) -> None:
        if fingerprint is None:
            return
        manifest = self.directory / MANIFEST_FILE
        if not manifest.exists():
            atomic_write_bytes(manifest, json.dumps({"fingerprint": fingerprint}).encode())
            return
        recorded = json.loads(manifest.read_text()).get("fingerprint")
        if recorded != fingerprint:
            raise BatchInputChanged(
                f"the outputs in {self.directory} were made from other input "
                f"(fingerprint {recorded}, now {fingerprint}); restore the original input "
                "or use a fresh output directory"
            )

    def _remove_leftovers(self) -> None:
        for path in self.directory.rglob(".tmp-*"):
            if path.is_file():
                path.unlink(missing_ok=True)


def fingerprint_of(*parts: bytes | str) -> str:
    """A short sha256 of the job's input and settings, for `BatchProgress(fingerprint=...)`."""
    digest = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        digest.update(len(data).to_bytes(8, "big") + data)
    return digest.hexdigest()[:32]
