"""PyTorch Lightning integration: on SIGTERM, an atomic checkpoint at the end of the batch.

    callback = LowcostgpuLightningCallback(dirpath=volume / "ckpts", every_n_steps=500)
    trainer = L.Trainer(..., callbacks=[callback])
    try:
        trainer.fit(model, datamodule=dm, ckpt_path=latest_checkpoint(volume / "ckpts"))
    except SIGTERMException:
        sys.exit(EXIT_INTERRUPTED)   # Lightning raises it (a SystemExit with status 0!)

How it sits next to Lightning's own SIGTERM handling (checked on lightning 2.6): at `fit` start
Lightning installs a handler that sets `trainer.received_sigterm` and *chains* any handler
already installed. Our StopNotice is installed when the callback is created, so before `fit`,
and both see the signal. After the batch's `on_train_batch_end` hooks Lightning raises
`SIGTERMException`; our hook runs first, so the checkpoint is already durable by then. We never
replace Lightning's handler and never reset its flag. Lightning's SLURM auto-requeue (SIGUSR1 →
`scontrol requeue`) would requeue a second time next to lowcostgpu's own requeue: we warn.

Files: `dirpath/step-000000004200.ckpt`, written to `.tmp-…` first, fsynced, renamed, and the
directory fsynced, so any `step-*.ckpt` present is whole.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import time
import uuid
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
from lightning.fabric.plugins.environments.slurm import SLURMEnvironment
from lightning.pytorch.utilities.exceptions import SIGTERMException

from lowcostgpu.sdk.durable import fsync_dir, fsync_file, fsync_tree
from lowcostgpu.sdk.integrations._common import resolve_metadata, resolve_notice
from lowcostgpu.sdk.metadata import MetadataClient
from lowcostgpu.sdk.notice import StopNotice

log = logging.getLogger("lowcostgpu.sdk")

_CKPT = re.compile(r"^step-(\d{12})\.ckpt$")


def checkpoint_name(step: int) -> str:
    return f"step-{step:012d}.ckpt"


def checkpoints(dirpath: str | Path) -> list[tuple[int, Path]]:
    """(step, path) of every finished checkpoint under dirpath, oldest first."""
    root = Path(dirpath)
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if (m := _CKPT.match(p.name))]
    return sorted(found)


def latest_checkpoint(dirpath: str | Path) -> str | None:
    """The newest checkpoint, as a str for `trainer.fit(ckpt_path=...)`; None: start fresh."""
    found = checkpoints(dirpath)
    return str(found[-1][1]) if found else None


class LowcostgpuLightningCallback(pl.Callback):
    """Saves atomically on SIGTERM (and every_n_steps if given), stops, reports each save.

    `interrupted` is True after a fit that ended because of a notice; `/complete` is reported
    only for a fit that ended on its own.
    """

    def __init__(
        self,
        dirpath: str | Path,
        every_n_steps: int | None = None,
        keep_last: int = 2,
        notice: StopNotice | None = None,
        metadata: MetadataClient | None = None,
        report_complete: bool = True,
    ) -> None:
        if every_n_steps is not None and every_n_steps < 1:
            raise ValueError(f"every_n_steps must be 1 or more (or None), got {every_n_steps}")
        if keep_last < 1:
            raise ValueError(f"keep_last must be 1 or more, got {keep_last}")
        self.dirpath = Path(dirpath)
        self.every_n_steps = every_n_steps
        self.keep_last = keep_last
        self.notice = resolve_notice(notice)  # before fit: Lightning then chains our handler
        self.metadata = resolve_metadata(metadata)
        self.report_complete = report_complete
        self.interrupted = False
        self.resumed_from_step: int | None = None
        self.last_saved_step: int | None = None

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        env = trainer._accelerator_connector.cluster_environment
        if isinstance(env, SLURMEnvironment) and env.auto_requeue:
            log.warning(
                "lowcostgpu: Lightning's SLURM auto-requeue is on; lowcostgpu requeues interrupted "
                "work itself. Pass plugins=[SLURMEnvironment(auto_requeue=False)] to avoid a "
                "second requeue."
            )

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.interrupted = False
        self.resumed_from_step = trainer.global_step if trainer.global_step > 0 else None
        self.last_saved_step = self.resumed_from_step
        if trainer.is_global_zero:
            _remove_leftovers(self.dirpath)

    def on_train_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        local = self.notice.requested or trainer.received_sigterm
        if trainer.strategy.reduce_boolean_decision(local, all=False):
            log.warning(
                "lowcostgpu: stop requested; saving step %d and stopping", trainer.global_step
            )
            self.interrupted = True
            trainer.should_stop = True
            self.save(trainer)
        elif self._due(trainer.global_step) or self._early_save(trainer):
            self.save(trainer)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        stopped = self.interrupted or trainer.received_sigterm
        if not stopped and self.report_complete and trainer.is_global_zero:
            self.metadata.report_complete(trainer.global_step)

    def on_exception(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException
    ) -> None:
        """SIGTERM that arrived after our batch hook (in a later hook, or in validation):
        Lightning stops at its own check, at a loop boundary it knows how to resume from, and
        we save there."""
        if isinstance(exception, SIGTERMException):
            self.interrupted = True
            if self.last_saved_step != trainer.global_step:
                self.save(trainer)

    def save(self, trainer: pl.Trainer) -> Path:
        """Checkpoint the current state atomically (all ranks call it), prune, report."""
        step = trainer.global_step
        final = self.dirpath / checkpoint_name(step)
        if self.last_saved_step == step and final.exists():
            return final
        tmp = self.dirpath / f".tmp-{final.name}-{uuid.uuid4().hex[:8]}"
        if trainer.is_global_zero:
            self.dirpath.mkdir(parents=True, exist_ok=True)
        trainer.strategy.barrier("lowcostgpu.save.mkdir")
        started = time.monotonic()
        trainer.save_checkpoint(tmp)  # a collective on sharded strategies
        if trainer.is_global_zero:
            _commit(tmp, final)
            save_s = round(time.monotonic() - started, 6)
            self._prune()
            # This callback saves at every notice it sees: a claim the plane weighs.
            self.metadata.report_checkpoint(
                step, path=str(final), save_s=save_s, saves_on_notice=self.notice.installed
            )
        trainer.strategy.barrier("lowcostgpu.save.commit")
        self.last_saved_step = step
        return final

    def _early_save(self, trainer: pl.Trainer) -> bool:
        """At risk of a reclaim (`StopNotice.early_save_due`): one save per risk episode, so
        that a reclaim finds little to lose. The save is a collective, so the ranks agree first:
        one more boolean reduction per batch when there is more than one rank."""
        local = self.notice.early_save_due()
        if trainer.world_size <= 1:
            return local
        return bool(trainer.strategy.reduce_boolean_decision(local, all=False))

    def _due(self, step: int) -> bool:
        return (
            self.every_n_steps is not None
            and step > 0
            and step % self.every_n_steps == 0
            and step != self.last_saved_step
        )

    def _prune(self) -> None:
        for _, path in checkpoints(self.dirpath)[: -self.keep_last]:
            _remove(path)


def _commit(tmp: Path, final: Path) -> None:
    """fsync what save_checkpoint wrote (a file, or a dir for sharded saves), rename, fsync."""
    if tmp.is_dir():
        fsync_tree(tmp)
    else:
        fsync_file(tmp)
    if final.is_dir():  # a sharded save of a step saved before: os.replace cannot overwrite
        _remove(final)
    os.replace(tmp, final)
    fsync_dir(final.parent)


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _remove_leftovers(dirpath: Path) -> None:
    """A `.tmp-*` entry is a save that a SIGKILL cut short: never complete, remove it."""
    if dirpath.is_dir():
        for path in dirpath.glob(".tmp-*"):
            _remove(path)
