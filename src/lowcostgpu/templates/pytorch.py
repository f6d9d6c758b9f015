"""Template `pytorch`: a small, real training run that survives interruptions bit-identically.

A tiny MLP regresses a fixed random target function on synthetic data generated from a seed.
It uses dropout (torch RNG), input noise (NumPy RNG) and a noise scale drawn with `random`, so
resuming exercises every RNG stream the SDK restores. Checkpoints go to $LOWCOSTGPU_VOLUME/
checkpoints, the final weights and the loss trajectory to $LOWCOSTGPU_VOLUME/final.

    python -m lowcostgpu.templates.pytorch --steps 500 --every-steps 50
"""

from __future__ import annotations

import argparse
import io
import json
import random
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch import nn

from lowcostgpu.sdk.checkpoint import Checkpointer
from lowcostgpu.sdk.durable import atomic_write_bytes
from lowcostgpu.sdk.torch import TorchState, make_dataloader
from lowcostgpu.templates._runtime import (
    EXIT_INTERRUPTED,
    Workload,
    exit_now,
    fail,
    say,
    start_workload,
)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m lowcostgpu.templates.pytorch")
    parser.add_argument("--steps", type=int, default=300, help="optimizer steps in all")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--dataset-size", type=int, default=1024)
    parser.add_argument("--features", type=int, default=16)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--every-steps", type=int, default=50, help="checkpoint interval")
    parser.add_argument("--every-s", type=float, default=None, help="checkpoint interval (s)")
    parser.add_argument("--adaptive", action="store_true", help="Young–Daly interval")
    parser.add_argument("--keep-last", type=int, default=3)
    parser.add_argument("--workers", type=int, default=0, help="DataLoader worker processes")
    parser.add_argument("--async-save", choices=["off", "thread", "dcp"], default="off")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads for torch")
    parser.add_argument("--step-delay-s", type=float, default=0.0, help="slow steps down (demos)")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.batch_size < 1 or args.dataset_size < args.batch_size:
        parser.error("need --steps >= 1 and 1 <= --batch-size <= --dataset-size")
    return args


def synthetic_dataset(seed: int, size: int, features: int) -> torch.utils.data.TensorDataset:
    """Inputs and a fixed nonlinear target, from a private generator (global RNGs untouched)."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(size, features, generator=generator)
    w = torch.randn(features, 1, generator=generator)
    y = torch.sin(x @ w) + 0.1 * torch.randn(size, 1, generator=generator)
    return torch.utils.data.TensorDataset(x, y)


def build_model(features: int, hidden: int) -> nn.Module:
    return nn.Sequential(
        nn.Linear(features, hidden),
        nn.ReLU(),
        nn.Dropout(0.1),
        nn.Linear(hidden, hidden),
        nn.ReLU(),
        nn.Linear(hidden, 1),
    )


RUN_CONFIG_KEYS = ("features", "hidden", "seed", "dataset_size", "batch_size")


def check_run_config(volume: Path, args: argparse.Namespace) -> None:
    """Refuse to resume checkpoints made with another model shape or data (clear error)."""
    config = {key: getattr(args, key) for key in RUN_CONFIG_KEYS}
    path = volume / "pytorch_run.json"
    if not path.exists():
        atomic_write_bytes(path, json.dumps(config, sort_keys=True).encode())
        return
    recorded = json.loads(path.read_text())
    changed = [
        f"--{k.replace('_', '-')} {recorded.get(k)} -> {config[k]}"
        for k in config
        if recorded.get(k) != config[k]
    ]
    if changed:
        fail(
            f"the checkpoints on {volume} were made with other settings ({', '.join(changed)}); "
            "resume with the original settings or use a fresh volume"
        )


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def train_step(state: TorchState, batch: Sequence[torch.Tensor], device: torch.device) -> float:
    model, optimizer, scheduler = state.model, state.optimizer, state.scheduler
    if optimizer is None or scheduler is None:
        raise ValueError("the pytorch template trains with an optimizer and a scheduler")
    x, y = (t.to(device) for t in batch)
    noise_scale = 0.05 * random.random()
    noise = torch.from_numpy(np.random.standard_normal(x.shape).astype(np.float32))
    x = x + noise_scale * noise.to(device)
    loss = nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad(set_to_none=True)
    torch.autograd.backward(loss)
    optimizer.step()
    scheduler.step()
    return float(loss.item())


def build_state(args: argparse.Namespace, device: torch.device) -> TorchState:
    torch.set_num_threads(args.threads)
    if device.type == "cuda":  # CPU kernels are deterministic already; this import is slow
        torch.use_deterministic_algorithms(True, warn_only=True)
    seed_everything(args.seed)
    model = build_model(args.features, args.hidden).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.steps)
    return TorchState(model, optimizer, scheduler)


def build_checkpointer(args: argparse.Namespace, work: Workload) -> Checkpointer:
    return Checkpointer(
        work.volume / "checkpoints",
        keep_last=args.keep_last,
        every_steps=args.every_steps,
        every_s=args.every_s,
        adaptive=args.adaptive,
        metadata=work.metadata,
        notice=work.notice,
        grace_period_s=work.env.grace_period_s,
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    work = start_workload()
    check_run_config(work.volume, args)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    state = build_state(args, device)
    ckpt = build_checkpointer(args, work)
    loaded = ckpt.load_latest(state.load)
    step, losses = 0, []
    if loaded is not None:
        step, losses = loaded[1].step, list(loaded[1].extra["losses"])
        say(f"resumed from step {step} (restart {work.env.restart_count})")
    loader = make_dataloader(
        synthetic_dataset(args.seed, args.dataset_size, args.features),
        batch_size=args.batch_size,
        seed=args.seed,
        total_steps=args.steps,
        start_step=step,
        num_workers=args.workers,
    )
    state.model.train()
    for batch in loader:
        losses.append(train_step(state, batch, device))
        step += 1
        say(f"step {step} loss {losses[-1]!r}")
        if ckpt.should_stop():
            return stop(ckpt, state, step, losses)
        early = ckpt.early_save_due()  # a preemption-risk warning: once per episode
        if ckpt.due(step) or early:
            save(ckpt, state, step, losses, args.async_save)
        if args.step_delay_s:
            work.notice.wait(args.step_delay_s)
    return finish(work, ckpt, state, step, losses)


def save(ckpt: Checkpointer, state: TorchState, step: int, losses: list[float], mode: str) -> None:
    extra = {"losses": list(losses)}
    if mode == "thread":
        ckpt.save_async(step, lambda d: state.stage(d, step, extra))
    elif mode == "dcp":
        ckpt.save_async(step, lambda d: state.save_dcp_async(d, step, extra))
    else:
        ckpt.save(step, lambda d: state.save(d, step, extra))


def stop(ckpt: Checkpointer, state: TorchState, step: int, losses: list[float]) -> int:
    """The notice came: checkpoint this step and exit 143 — interrupted, not complete."""
    ckpt.wait()
    ckpt.save(step, lambda d: state.save(d, step, {"losses": list(losses)}))
    say(f"checkpoint step {step} on volume")
    return EXIT_INTERRUPTED


def finish(
    work: Workload, ckpt: Checkpointer, state: TorchState, step: int, losses: list[float]
) -> int:
    ckpt.wait()
    if ckpt.latest() is None or ckpt.latest().step != step:  # type: ignore[union-attr]
        ckpt.save(step, lambda d: state.save(d, step, {"losses": list(losses)}))
    final = work.volume / "final"
    final.mkdir(exist_ok=True)
    buffer = io.BytesIO()
    torch.save({k: v.cpu() for k, v in state.model.state_dict().items()}, buffer)
    atomic_write_bytes(final / "model.pt", buffer.getvalue())
    atomic_write_bytes(final / "losses.json", json.dumps(losses).encode())
    ckpt.finish(step)
    say(f"done step {step}, final weights in {Path(final) / 'model.pt'}")
    return 0


if __name__ == "__main__":
    exit_now(main())
