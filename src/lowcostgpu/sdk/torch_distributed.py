"""Checkpoints of a job that spans several processes (one member per host, under torchrun).

At a reclaim every member gets SIGTERM, at about the same time but never at the same instant,
and each notices it at a different step. A checkpoint whose shards come from different steps
would resume into a state that never existed, so the ranks agree first: at every step boundary
one tiny all_reduce (MAX) tells all of them whether any has seen a notice; then all save the
same step, together, and exit.

Layout: the `Checkpointer` one (`step-000000004200/` with its marker), holding a DCP directory
`dcp/` in which every rank writes its own shard (`__<rank>_0.distcp`). Model and optimizer are
DCP's state dicts (replicated tensors, e.g. DDP's, are written once; DTensor/FSDP shards by the
rank that holds them); each rank's RNG streams, scheduler, step and extra go under a key of its
own (`ranks.<rank>`), because DCP keeps one copy of a plain value saved under the same key by
several ranks. A checkpoint is *complete* when every rank has written its shard (a barrier)
and rank 0 has then written the marker and renamed the directory into place: a member killed
mid-save leaves only a `.tmp-*` directory (or a marker-less or short one), which is never
loaded. Resume: rank 0 picks the newest complete and intact checkpoint and tells the others,
so that all load the same step.

Only rank 0 owns a `Checkpointer` (marker, pruning, interval policy, reports to the metadata
endpoint, removal of leftovers); the others never touch the directory but to write shards.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict_loader import load as dcp_load
from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

from lowcostgpu.sdk.checkpoint import Checkpointer
from lowcostgpu.sdk.metadata import MetadataClient
from lowcostgpu.sdk.notice import StopNotice, default_notice
from lowcostgpu.sdk.torch import DCP_DIR, LoadedState, TorchState

RANKS_KEY = "ranks"


@dataclass(frozen=True)
class Boundary:
    """What every rank does after a step; the same answer on all of them."""

    stop: bool  # some rank saw a notice: save this step, then exit with EXIT_INTERRUPTED
    save: bool  # rank 0's interval policy (or a preemption-risk warning) wants a checkpoint


class DistributedCheckpointer:
    """Collective checkpoints of a `TorchState`: every method must be called by every rank, in
    the same order (like any torch.distributed collective), after `init_process_group`."""

    def __init__(
        self,
        directory: str | Path,
        state: TorchState,
        notice: StopNotice | None = None,
        metadata: MetadataClient | None = None,
        keep_last: int = 3,
        every_steps: int | None = None,
        every_s: float | None = None,
    ) -> None:
        """The interval options are rank 0's `Checkpointer` policy (a time-based rule read on
        each rank would disagree between ranks); `metadata` reports from rank 0 only, one
        report per checkpoint. `notice` defaults to the process-wide SIGTERM flag."""
        if not dist.is_initialized():
            raise RuntimeError(
                "DistributedCheckpointer needs a process group: call "
                "torch.distributed.init_process_group() first (torchrun sets its variables)"
            )
        self.state = state
        self.rank = dist.get_rank()
        self.notice = notice if notice is not None else default_notice()
        self._device = _collective_device()
        self._local = (
            Checkpointer(
                directory,
                keep_last=keep_last,
                every_steps=every_steps,
                every_s=every_s,
                metadata=metadata,
                notice=self.notice,
            )
            if self.rank == 0
            else None
        )

    def boundary(self, step: int) -> Boundary:
        """Call after every step: one all_reduce of four integers decides for all ranks.

        Also checks that all ranks are at the same step (a rank that ran one more or one fewer
        would otherwise save shards of two different steps under one name).
        """
        if self._local is not None:
            requested = self._local.should_stop()  # also tells the reports we save at notices
            early = self._local.early_save_due()  # asked every step: it consumes the warning
            due = self._local.due(step) or early
        else:
            requested, due = self.notice.requested, False
        flags = torch.tensor([int(requested), int(due), step, -step], device=self._device)
        dist.all_reduce(flags, op=dist.ReduceOp.MAX)
        stop, save, highest, lowest = (int(value) for value in flags.tolist())
        if highest != -lowest:
            raise RuntimeError(f"ranks disagree on the step: from {-lowest} to {highest}")
        return Boundary(stop=bool(stop), save=bool(save))

    def save(self, step: int, extra: dict[str, Any] | None = None) -> Path:
        """Save `step` on every rank and return the complete checkpoint's directory.

        Blocking: at a notice the checkpoint must be complete before any member exits. Returns
        on every rank only once rank 0 has committed it (marker written, directory renamed).
        """
        committed: list[str | None] = [None]
        if self._local is not None:
            info = self._local.save(step, lambda tmp: self._write_shard(tmp, step, extra))
            committed = [str(info.path)]
        else:
            self._write_shard(None, step, extra)
        dist.broadcast_object_list(committed, src=0)
        return Path(str(committed[0]))

    def load_latest(self) -> LoadedState | None:
        """Restore every rank from the newest complete checkpoint (rank 0's choice, so that all
        ranks load the same step); None when there is none, e.g. on a first start."""
        chosen: list[str | None] = [None]
        if self._local is not None:
            info = self._local.latest()
            chosen = [str(info.path) if info is not None else None]
        dist.broadcast_object_list(chosen, src=0)
        if chosen[0] is None:
            return None
        target = self.state.dcp_state()
        target[RANKS_KEY] = {str(self.rank): b""}  # DCP replaces a plain value by the saved one
        dcp_load(target, checkpoint_id=str(Path(chosen[0]) / DCP_DIR))
        self.state.apply_dcp_state(target)
        rest = torch.load(io.BytesIO(target[RANKS_KEY][str(self.rank)]), weights_only=True)
        loaded = self.state.apply_rest(rest)
        if self._local is not None:
            self._local.policy.resume_from(loaded.step)
        return loaded

    def finish(self, step: int | None = None) -> bool:
        """The run is done on purpose: rank 0 reports complete (one success for the instance)."""
        dist.barrier()  # no member is still training when the instance is reported complete
        return self._local.finish(step) if self._local is not None else False

    def _write_shard(self, tmp: Path | None, step: int, extra: dict[str, Any] | None) -> None:
        """Rank 0 names its temp directory (given `tmp`); every rank writes its shard there."""
        where = [str(tmp) if tmp is not None else None]
        dist.broadcast_object_list(where, src=0)
        rest = io.BytesIO()
        torch.save(self.state.rest_state(step, extra), rest)
        shard = self.state.dcp_state()
        shard[RANKS_KEY] = {str(self.rank): rest.getvalue()}
        dcp_save(shard, checkpoint_id=str(Path(str(where[0])) / DCP_DIR))
        dist.barrier()  # every shard is written before rank 0 writes the marker


def _collective_device() -> torch.device:
    """NCCL reduces only CUDA tensors; gloo (and a `cpu:gloo,cuda:nccl` group) takes CPU ones."""
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")
