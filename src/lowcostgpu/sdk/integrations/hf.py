"""Hugging Face Trainer integration: save at the end of the step on SIGTERM, resume only whole.

    callback = LowcostgpuTrainerCallback()
    trainer = Trainer(model, args, train_dataset=ds, callbacks=[callback])
    trainer.train(resume_from_checkpoint=latest_complete_checkpoint(args.output_dir))
    if callback.interrupted:
        sys.exit(EXIT_INTERRUPTED)

Why a completeness marker: the Trainer (checked on transformers 5.x) writes `checkpoint-N/` in
place, file by file (weights, optimizer, scheduler, RNG, trainer_state.json), with no temp dir,
no rename and no fsync. A SIGKILL or power cut mid-save leaves a directory that looks like a
checkpoint. After the Trainer's save returns (`on_save`) we fsync the directory tree and write
`_LOWCOSTGPU_COMPLETE.json` atomically, listing every file and its size; the resume helper only
accepts directories whose marker matches what is on disk.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import time
from pathlib import Path
from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from lowcostgpu.sdk.durable import atomic_write_bytes, fsync_dir, fsync_tree
from lowcostgpu.sdk.integrations._common import resolve_metadata, resolve_notice
from lowcostgpu.sdk.metadata import MetadataClient
from lowcostgpu.sdk.notice import StopNotice

log = logging.getLogger("lowcostgpu.sdk")

MARKER_NAME = "_LOWCOSTGPU_COMPLETE.json"
# Written by the Trainer's own JIT checkpointing while a save is in progress.
HF_IN_PROGRESS_SENTINEL = "checkpoint-is-incomplete.txt"
_CHECKPOINT_DIR = re.compile(r"^checkpoint-(\d+)$")
_WEIGHTS = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
    "adapter_model.safetensors",
    "adapter_model.bin",
)
_OPTIMIZER = ("optimizer.pt", "optimizer.bin")
_SCHEDULER = ("scheduler.pt",)


def checkpoint_step(path: Path) -> int | None:
    """N for a directory named `checkpoint-N`, else None."""
    match = _CHECKPOINT_DIR.match(path.name)
    return int(match.group(1)) if match else None


def missing_resume_files(path: Path) -> list[str]:
    """What a full resume needs and `path` lacks (empty when all present).

    trainer_state.json is written last by the Trainer, and must name the same step as the
    directory; weights, optimizer, scheduler and RNG state are what `resume_from_checkpoint`
    restores. A `save_only_model=True` checkpoint lacks the optimizer and cannot resume.
    """
    missing = []
    if not _state_matches(path):
        missing.append("trainer_state.json (for this step)")
    for label, names in (
        ("weights", _WEIGHTS),
        ("optimizer", _OPTIMIZER),
        ("scheduler", _SCHEDULER),
    ):
        if not any((path / name).is_file() for name in names):
            missing.append(f"{label} ({' or '.join(names)})")
    if not any(path.glob("rng_state*.pth")):
        missing.append("rng_state.pth")
    return missing


def _state_matches(path: Path) -> bool:
    try:
        state = json.loads((path / "trainer_state.json").read_text())
        return int(state["global_step"]) == checkpoint_step(path)
    except (OSError, ValueError, KeyError, TypeError):
        return False


def write_completion_marker(path: Path) -> None:
    """Make `path` durable, then record its files and sizes in an atomically written marker."""
    step = checkpoint_step(path)
    if step is None:
        raise ValueError(f"{path} is not a checkpoint-N directory")
    fsync_tree(path)
    files = {
        p.relative_to(path).as_posix(): p.stat().st_size
        for p in sorted(path.rglob("*"))
        if p.is_file() and p.name != MARKER_NAME
    }
    marker = {"step": step, "files": files, "created_at": time.time()}
    atomic_write_bytes(path / MARKER_NAME, json.dumps(marker, indent=1).encode())


def is_complete_checkpoint(path: Path, require_marker: bool = True) -> bool:
    """True when `path` is a checkpoint-N dir that a resume can use in full.

    With require_marker (the default) only directories finished under our callback qualify:
    every file the marker lists exists with the recorded size. Without it, a directory written
    without the callback is accepted when every file a resume needs is present (trusting that
    the process was not killed while the last of them was being written).
    """
    step = checkpoint_step(path)
    if step is None or not path.is_dir() or (path / HF_IN_PROGRESS_SENTINEL).exists():
        return False
    if missing_resume_files(path):
        return False
    try:
        marker = json.loads((path / MARKER_NAME).read_text())
    except FileNotFoundError:
        return not require_marker
    except (OSError, ValueError):
        return False
    return _marker_matches(path, step, marker)


def _marker_matches(path: Path, step: int, marker: Any) -> bool:
    if not isinstance(marker, dict) or marker.get("step") != step:
        return False
    files = marker.get("files")
    if not isinstance(files, dict) or not files:
        return False
    for name, size in files.items():
        file = path / name
        if not file.is_file() or file.stat().st_size != size:
            return False
    return True


def latest_complete_checkpoint(output_dir: str | Path, require_marker: bool = True) -> str | None:
    """The newest complete `checkpoint-N` under output_dir, as a str for `resume_from_checkpoint`.

    None when there is none (a fresh start). Incomplete or half-written directories are skipped,
    so a crash in the middle of a save falls back to the previous checkpoint.
    """
    root = Path(output_dir)
    if not root.is_dir():
        return None
    candidates = [p for p in root.iterdir() if checkpoint_step(p) is not None]
    for path in sorted(candidates, key=lambda p: checkpoint_step(p) or 0, reverse=True):
        if is_complete_checkpoint(path, require_marker=require_marker):
            return str(path)
        log.warning("lowcostgpu: skipping incomplete checkpoint %s", path)
    return None


class LowcostgpuTrainerCallback(TrainerCallback):
    """SIGTERM → save at the end of the current optimizer step and stop; report each save.

    `interrupted` tells the script afterwards that train() returned because of a notice (exit
    with EXIT_INTERRUPTED then); `/complete` is reported only when training ran to its end.
    """

    def __init__(
        self,
        notice: StopNotice | None = None,
        metadata: MetadataClient | None = None,
        report_complete: bool = True,
    ) -> None:
        self.notice = resolve_notice(notice)
        self.metadata = resolve_metadata(metadata)
        self.report_complete = report_complete
        self.interrupted = False
        self.resumed_from_step: int | None = None
        self.last_saved_step: int | None = None
        self._save_started: float | None = None  # when the Trainer was told to save

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        if getattr(args, "enable_jit_checkpoint", False):
            raise ValueError(
                "TrainingArguments(enable_jit_checkpoint=True) installs a second SIGTERM handler "
                "that saves mid-step; turn it off when using LowcostgpuTrainerCallback, which "
                "saves at the end of the step itself"
            )
        self.interrupted = False
        self.resumed_from_step = state.global_step if state.global_step > 0 else None
        if args.should_save:
            _remove_incomplete(_output_dir(args), after_step=state.global_step)

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        if _any_rank(self.notice.requested, args):
            log.warning(
                "lowcostgpu: stop requested (%s); saving step %d and stopping",
                self.notice.reason or "another rank",
                state.global_step,
            )
            self.interrupted = True
            control.should_save = True
            control.should_training_stop = True
        elif _any_rank(self.notice.early_save_due(), args):
            control.should_save = True  # at risk of a reclaim: once per risk episode
        if control.should_save and args.should_save:
            self._save_started = time.monotonic()  # the Trainer saves right after this hook
            _invalidate(_output_dir(args) / f"checkpoint-{state.global_step}")

    def on_save(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        _barrier(args)  # sharded saves: every rank's files are written before the marker
        if not args.should_save:
            return
        path = _output_dir(args) / f"checkpoint-{state.global_step}"
        if not path.is_dir():
            return
        write_completion_marker(path)
        self.last_saved_step = state.global_step
        started, self._save_started = self._save_started, None
        save_s = None if started is None else round(time.monotonic() - started, 6)
        # This callback saves at every notice it sees: a claim the plane weighs (`save_s`).
        self.metadata.report_checkpoint(
            state.global_step,
            path=str(path),
            save_s=save_s,
            saves_on_notice=self.notice.installed and save_s is not None,
        )

    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        finished = not self.interrupted and state.global_step >= state.max_steps
        if finished and self.report_complete and args.should_save:
            self.metadata.report_complete(state.global_step)


def _output_dir(args: TrainingArguments) -> Path:
    """Where the Trainer puts checkpoint-N (it defaults output_dir when none is given)."""
    return Path(args.output_dir or "trainer_output")


def _invalidate(path: Path) -> None:
    """Before the Trainer rewrites checkpoint-N in place, it must stop counting as complete."""
    if (path / MARKER_NAME).exists():
        (path / MARKER_NAME).unlink()
        fsync_dir(path)


def _remove_incomplete(output_dir: str | Path, after_step: int) -> None:
    """Drop half-written checkpoint dirs newer than where we start: they are the leftovers of a
    crash, and the Trainer would count them towards save_total_limit."""
    root = Path(output_dir)
    if not root.is_dir():
        return
    for path in root.iterdir():
        step = checkpoint_step(path)
        if step is None or step <= after_step or not path.is_dir():
            continue
        if not is_complete_checkpoint(path, require_marker=False):
            log.warning("lowcostgpu: removing incomplete checkpoint %s", path)
            shutil.rmtree(path, ignore_errors=True)


def _any_rank(flag: bool, args: TrainingArguments) -> bool:
    """In distributed runs every rank must stop at the same step, or the save deadlocks."""
    if getattr(args, "world_size", 1) <= 1:
        return flag
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return flag
    tensor = torch.tensor([1 if flag else 0], device=args.device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return bool(tensor.item())


def _barrier(args: TrainingArguments) -> None:
    if getattr(args, "world_size", 1) <= 1:
        return
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
