"""Training state round-trips exactly: weights, optimizer, scheduler, every RNG, data order."""

from __future__ import annotations

import os
import random
import signal
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from lowcostgpu.sdk.checkpoint import Checkpointer  # noqa: E402
from lowcostgpu.sdk.notice import StopNotice  # noqa: E402
from lowcostgpu.sdk.torch import (  # noqa: E402
    StepBatchSampler,
    TorchState,
    load_training_state,
    make_dataloader,
    save_training_state,
)


def build(seed: int = 0) -> TorchState:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(
        torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Dropout(0.2), torch.nn.Linear(8, 1)
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    return TorchState(model, optimizer, scheduler)


def train(state: TorchState, steps: int) -> list[float]:
    losses = []
    for _ in range(steps):
        x = torch.randn(8, 4) + float(np.random.standard_normal()) + random.random()
        loss = state.model(x).pow(2).mean()
        state.optimizer.zero_grad()  # type: ignore[union-attr]
        torch.autograd.backward(loss)
        state.optimizer.step()  # type: ignore[union-attr]
        state.scheduler.step()
        losses.append(float(loss.item()))
    return losses


def seed_all(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
@pytest.mark.parametrize("mode", ["sync", "thread", "dcp"])
def test_resuming_continues_the_exact_loss_trajectory(tmp_path: Path, mode: str) -> None:
    seed_all(1)
    reference = train(build(), 10)

    seed_all(1)
    first = build()
    head = train(first, 4)
    ckpt = Checkpointer(tmp_path, notice=StopNotice())
    if mode == "sync":
        ckpt.save(4, lambda d: first.save(d, 4, {"note": "x"}))
    elif mode == "thread":
        ckpt.save_async(4, lambda d: first.stage(d, 4, {"note": "x"}))
        train(first, 3)  # the live state moves on; the snapshot must not
        ckpt.wait()
    else:
        ckpt.save_async(4, lambda d: first.save_dcp_async(d, 4, {"note": "x"}))
        ckpt.wait()
    seed_all(999)  # a new process starts with other RNG states; the load must fix them
    resumed = build(seed=123)
    loaded = ckpt.load_latest(resumed.load)
    assert loaded is not None
    assert (loaded[1].step, loaded[1].extra) == (4, {"note": "x"})
    assert head + train(resumed, 6) == reference


def test_function_forms_round_trip(tmp_path: Path) -> None:
    state = build()
    train(state, 3)
    save_training_state(tmp_path, state.model, state.optimizer, state.scheduler, step=3)
    other = build(seed=5)
    loaded = load_training_state(tmp_path, other.model, other.optimizer, other.scheduler)
    assert loaded.step == 3
    for a, b in zip(state.model.parameters(), other.model.parameters(), strict=True):
        assert torch.equal(a, b)
    assert other.scheduler.state_dict() == state.scheduler.state_dict()


@pytest.mark.parametrize("start_step", [0, 7, 12, 25])
def test_batch_order_depends_only_on_seed_and_step(start_step: int) -> None:
    full = list(StepBatchSampler(length=50, batch_size=8, seed=3, total_steps=30))
    resumed = list(StepBatchSampler(50, 8, seed=3, total_steps=30, start_step=start_step))
    assert resumed == full[start_step:]


def test_each_epoch_is_a_permutation_without_repeats() -> None:
    sampler = StepBatchSampler(length=24, batch_size=8, seed=0, total_steps=6)
    batches = list(sampler)
    assert sorted(i for b in batches[:3] for i in b) == list(range(24))
    assert batches[:3] != batches[3:]  # the next epoch is shuffled differently


def test_batch_size_larger_than_the_data_is_refused() -> None:
    with pytest.raises(ValueError, match="batch_size"):
        StepBatchSampler(length=4, batch_size=8, seed=0, total_steps=1)


class _WorkerSignals(torch.utils.data.Dataset):  # type: ignore[misc]
    def __len__(self) -> int:
        return 4

    def __getitem__(self, index: int) -> int:
        return int(signal.getsignal(signal.SIGTERM) == signal.SIG_IGN) * 1000 + os.getpid()


def test_dataloader_workers_ignore_sigterm_and_do_not_touch_global_rng() -> None:
    before = torch.get_rng_state()
    loader = make_dataloader(_WorkerSignals(), batch_size=2, seed=0, total_steps=2, num_workers=1)
    values = [int(v) for batch in loader for v in batch]
    assert all(v - os.getpid() != 0 for v in values)  # ran in a worker process
    assert all(v >= 1000 for v in values)
    assert torch.equal(torch.get_rng_state(), before)
