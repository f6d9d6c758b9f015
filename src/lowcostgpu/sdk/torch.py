"""PyTorch training state that resumes bit-identically: weights, optimizer, scheduler, RNGs, data.

Bit-identical means: an interrupted-and-resumed run logs exactly the same losses as an
uninterrupted one on the same machine. That needs every source of nondeterminism captured —
the torch CPU/CUDA, NumPy and Python RNG streams, the optimizer's moments, the scheduler's
position, and where in the data order we were. The data position is made a function of the
global step (`StepBatchSampler`), so nothing about prefetching or workers has to be saved.

Only this module imports torch, so the rest of the SDK works without it.
"""

from __future__ import annotations

import random
import signal
import warnings
from collections.abc import Callable, Iterator, Mapping, Sized
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import torch
from torch.utils.data import DataLoader, Dataset, Sampler

STATE_FILE = "training_state.pt"
META_FILE = "training_meta.pt"
DCP_DIR = "dcp"

# DCP warns on every save/load without a process group (from its own threads, so a local
# catch_warnings cannot catch it); single-process use is intended here.
warnings.filterwarnings("ignore", message="torch.distributed is disabled", category=UserWarning)


@dataclass
class LoadedState:
    step: int
    extra: dict[str, Any] = field(default_factory=dict)


# ---- RNG ---------------------------------------------------------------------------------
def capture_rng_state() -> dict[str, Any]:
    """All RNG streams a training step may draw from, as tensors and plain values."""
    state: dict[str, Any] = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    try:
        import numpy as np
    except ImportError:  # NumPy is optional; nothing to capture then
        return state
    raw: Any = np.random.get_state()
    kind, keys, pos, has_gauss, cached = raw
    state["numpy"] = {
        "kind": str(kind),
        "keys": torch.from_numpy(keys.astype(np.int64)),
        "pos": int(pos),
        "has_gauss": int(has_gauss),
        "cached_gaussian": float(cached),
    }
    return state


def restore_rng_state(state: Mapping[str, Any]) -> None:
    python_state = state["python"]
    random.setstate((python_state[0], tuple(python_state[1]), python_state[2]))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    if "numpy" in state:
        import numpy as np

        saved = state["numpy"]
        np.random.set_state(
            (
                saved["kind"],
                saved["keys"].numpy().astype(np.uint32),
                saved["pos"],
                saved["has_gauss"],
                saved["cached_gaussian"],
            )
        )


# ---- the state bundle ----------------------------------------------------------------------
class TorchState:
    """Model, optimizer and scheduler to checkpoint together (optimizer/scheduler optional)."""

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer | None = None,
        scheduler: Any | None = None,
    ) -> None:
        self.model = model
        self.optimizer = optimizer
        self.scheduler = scheduler

    def state_dict(self, step: int, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
        return {
            "format": 1,
            "step": int(step),
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict() if self.optimizer is not None else None,
            "scheduler": self.scheduler.state_dict() if self.scheduler is not None else None,
            "rng": capture_rng_state(),
            "extra": dict(extra or {}),
        }

    def save(self, directory: Path, step: int, extra: Mapping[str, Any] | None = None) -> None:
        """Write everything into `directory` (use as a Checkpointer write_fn); blocking."""
        torch.save(self.state_dict(step, extra), Path(directory) / STATE_FILE)

    def stage(
        self, directory: Path, step: int, extra: Mapping[str, Any] | None = None
    ) -> Callable[[], None]:
        """Copy the state to CPU memory now; return the slow write for a background thread.

        For `Checkpointer.save_async`: training may change the weights as soon as this returns.
        """
        snapshot = _copy_to_cpu(self.state_dict(step, extra))
        target = Path(directory) / STATE_FILE
        return lambda: torch.save(snapshot, target)

    def save_dcp_async(
        self, directory: Path, step: int, extra: Mapping[str, Any] | None = None
    ) -> Future[Any]:
        """Model and optimizer via torch.distributed.checkpoint.async_save; the small rest now.

        Blocks only while DCP stages the tensors into CPU memory. For a single process (no
        process group needed); the rest is one file, which several ranks would overwrite with
        their own RNG states: a job of several processes uses `torch_distributed`.
        """
        from torch.distributed.checkpoint.state_dict_saver import async_save

        torch.save(self.rest_state(step, extra), Path(directory) / META_FILE)
        response = async_save(
            self.dcp_state(),
            checkpoint_id=str(Path(directory) / DCP_DIR),
            no_dist=not _distributed(),
        )
        upload = getattr(response, "upload_completion", response)
        return cast("Future[Any]", upload)

    def load(self, directory: Path) -> LoadedState:
        """Restore from a directory written by save, stage or save_dcp_async."""
        directory = Path(directory)
        if (directory / DCP_DIR).is_dir():
            from torch.distributed.checkpoint.state_dict_loader import load

            target = self.dcp_state()
            load(target, checkpoint_id=str(directory / DCP_DIR), no_dist=not _distributed())
            self.apply_dcp_state(target)
            rest = torch.load(directory / META_FILE, map_location="cpu", weights_only=True)
            return self.apply_rest(rest)
        state = torch.load(directory / STATE_FILE, map_location="cpu", weights_only=True)
        self.model.load_state_dict(state["model"])
        if self.optimizer is not None and state["optimizer"] is not None:
            self.optimizer.load_state_dict(state["optimizer"])
        return self.apply_rest(state)

    def dcp_state(self) -> dict[str, Any]:
        """Model and optimizer in DCP's own view (string keys, DDP/FSDP wrappers undone, the
        optimizer's state created if it is fresh): what DCP saves and loads in place."""
        from torch.distributed.checkpoint.state_dict import get_state_dict

        optimizers = [self.optimizer] if self.optimizer is not None else []
        model_state, optim_state = get_state_dict(self.model, optimizers)
        state: dict[str, Any] = {"model": model_state}
        if self.optimizer is not None:
            state["optimizer"] = optim_state
        return state

    def apply_dcp_state(self, loaded: Mapping[str, Any]) -> None:
        """Put a `dcp_state()` that DCP has loaded into back into the model and optimizer."""
        from torch.distributed.checkpoint.state_dict import set_state_dict

        optimizers = [self.optimizer] if self.optimizer is not None else []
        set_state_dict(
            self.model,
            optimizers,
            model_state_dict=loaded["model"],
            optim_state_dict=loaded.get("optimizer", {}),
        )

    def rest_state(self, step: int, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Everything but the model and optimizer (step, scheduler, RNGs, extra): small, and
        private to the process (each rank has its own RNG streams), so saved beside DCP."""
        rest = self.state_dict(step, extra)
        del rest["model"], rest["optimizer"]
        return rest

    def apply_rest(self, rest: Mapping[str, Any]) -> LoadedState:
        """Restore a `rest_state()`: scheduler and RNGs; returns the step and the extra dict."""
        if self.scheduler is not None and rest["scheduler"] is not None:
            self.scheduler.load_state_dict(rest["scheduler"])
        restore_rng_state(rest["rng"])
        return LoadedState(step=int(rest["step"]), extra=dict(rest["extra"]))


def _distributed() -> bool:
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized()


def save_training_state(
    directory: Path,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: Any | None = None,
    step: int = 0,
    extra: Mapping[str, Any] | None = None,
) -> None:
    """Function form of TorchState.save, for `ckpt.save(step, lambda d: ...)`."""
    TorchState(model, optimizer, scheduler).save(directory, step, extra)


def load_training_state(
    directory: Path,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: Any | None = None,
) -> LoadedState:
    """Function form of TorchState.load; returns the step and the extra dict."""
    return TorchState(model, optimizer, scheduler).load(directory)


def _copy_to_cpu(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", copy=True)
    if isinstance(value, dict):
        return {key: _copy_to_cpu(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_copy_to_cpu(item) for item in value]
    if isinstance(value, tuple):
        return tuple(_copy_to_cpu(item) for item in value)
    return value


# ---- data order ------------------------------------------------------------------------------
class StepBatchSampler(Sampler[list[int]]):
    """Batch k is a pure function of (seed, k): resuming at step k needs no saved position.

    Each epoch is a fresh permutation seeded by (seed, epoch); batch k takes the slice
    [offset, offset + batch_size) of its epoch's permutation (the tail is dropped).
    """

    def __init__(
        self, length: int, batch_size: int, seed: int, total_steps: int, start_step: int = 0
    ) -> None:
        if not 0 < batch_size <= length:
            raise ValueError(f"need 0 < batch_size <= dataset length, got {batch_size}, {length}")
        self.length = length
        self.batch_size = batch_size
        self.seed = seed
        self.total_steps = total_steps
        self.start_step = start_step
        self.batches_per_epoch = length // batch_size

    def indices_for_step(self, step: int) -> list[int]:
        epoch, within = divmod(step, self.batches_per_epoch)
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        order = torch.randperm(self.length, generator=generator)
        start = within * self.batch_size
        return [int(i) for i in order[start : start + self.batch_size]]

    def __iter__(self) -> Iterator[list[int]]:
        for step in range(self.start_step, self.total_steps):
            yield self.indices_for_step(step)

    def __len__(self) -> int:
        return max(0, self.total_steps - self.start_step)


def ignore_sigterm_in_worker(worker_id: int) -> None:
    """DataLoader worker_init_fn: a SIGTERM sent to the process group must not kill workers.

    The main process decides when to stop (after finishing the step and checkpointing); a
    worker killed mid-step would make that step fail instead.
    """
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def make_dataloader(
    dataset: Dataset[Any],
    batch_size: int,
    seed: int,
    total_steps: int,
    start_step: int = 0,
    num_workers: int = 0,
    **kwargs: Any,
) -> DataLoader[Any]:
    """A DataLoader whose batch order depends only on (seed, step) and whose workers ignore SIGTERM.

    It has its own torch.Generator (seeded from seed and start_step), so it neither draws from
    nor disturbs the global torch RNG stream. Per-sample randomness in workers should be
    derived from the sample index to stay identical across resumes.
    """
    if not isinstance(dataset, Sized):
        raise TypeError("make_dataloader needs a map-style dataset with __len__")
    sampler = StepBatchSampler(len(dataset), batch_size, seed, total_steps, start_step)
    return DataLoader(
        dataset,
        batch_sampler=sampler,
        num_workers=num_workers,
        worker_init_fn=ignore_sigterm_in_worker if num_workers > 0 else None,
        generator=torch.Generator().manual_seed(seed * 1_000_003 + start_step),
        **kwargs,
    )
