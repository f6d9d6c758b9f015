"""A member of a multi-node training job, for test_torch_distributed.py; run under torchrun.

DDP over gloo; each rank draws its own batches (its own data seed), its own dropout masks and
input noise (torch, NumPy and Python RNG streams seeded by rank), so a rank restored with
another rank's state, or at another step, would log other losses. Each rank logs
`step N loss L` after every step (L as repr: it reads back as the exact float).
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import sys
import threading
import time
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from lowcostgpu.sdk.env import WorkloadEnv
from lowcostgpu.sdk.notice import EXIT_INTERRUPTED, StopNotice, install_sigterm_handler
from lowcostgpu.sdk.torch import StepBatchSampler, TorchState
from lowcostgpu.sdk.torch_distributed import DistributedCheckpointer

DATA_SIZE, BATCH = 48, 8


def build(rank: int) -> tuple[TorchState, torch.Tensor]:
    torch.manual_seed(0)  # the same initial weights and data everywhere (DDP also syncs them)
    data = torch.randn(DATA_SIZE, 4)
    model = torch.nn.Sequential(
        torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Dropout(0.3), torch.nn.Linear(8, 1)
    )
    ddp = DistributedDataParallel(model)
    optimizer = torch.optim.AdamW(ddp.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.7)
    random.seed(100 + rank)
    np.random.seed(100 + rank)
    torch.manual_seed(100 + rank)
    return TorchState(ddp, optimizer, scheduler), data


def train_step(state: TorchState, data: torch.Tensor, indices: list[int]) -> float:
    noise = float(np.random.standard_normal()) + random.random()
    x = data[indices] + 0.1 * torch.randn(len(indices), 4) + noise
    loss = state.model(x).pow(2).mean()
    assert state.optimizer is not None and state.scheduler is not None
    state.optimizer.zero_grad()
    torch.autograd.backward(loss)
    state.optimizer.step()
    state.scheduler.step()
    return float(loss.item())


def train(args: argparse.Namespace, env: WorkloadEnv, notice: StopNotice) -> int:
    rank = dist.get_rank()
    state, data = build(rank)
    ckpt = DistributedCheckpointer(
        env.volume / "checkpoints", state, notice=notice, every_steps=args.every_steps
    )
    loaded = ckpt.load_latest()
    step = loaded.step if loaded is not None else 0
    print(f"resumed from step {step} (restart {env.restart_count})", flush=True)
    sampler = StepBatchSampler(DATA_SIZE, BATCH, seed=10 + rank, total_steps=args.total_steps)
    while step < args.total_steps:
        loss = train_step(state, data, sampler.indices_for_step(step))
        step += 1
        print(f"step {step} loss {loss!r}", flush=True)
        time.sleep(args.sleep_s)  # a slow step, so that the test's SIGTERM lands mid-training
        at = ckpt.boundary(step)
        if at.stop or at.save:
            ckpt.save(step)
        if at.stop:
            print(f"interrupted at step {step}", flush=True)
            return EXIT_INTERRUPTED
    ckpt.finish(step)
    return 0


def exit_with_the_agent() -> None:
    """A member whose torchrun is gone (killed by the test's watchdog) must not linger."""
    agent = os.getppid()
    while os.getppid() == agent:
        time.sleep(0.5)
    os._exit(1)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--total-steps", type=int, required=True)
    parser.add_argument("--every-steps", type=int)
    parser.add_argument("--sleep-s", type=float, default=0.0)
    args = parser.parse_args(argv)
    notice = install_sigterm_handler()
    threading.Thread(target=exit_with_the_agent, daemon=True).start()
    env = WorkloadEnv.from_environ()
    dist.init_process_group("gloo", timeout=timedelta(seconds=120))
    assert (dist.get_rank(), dist.get_world_size()) == (env.node_rank, env.num_nodes)
    code = train(args, env, notice)
    # The DDP model must be gone before the process group: freed last by DDP's reducer, the
    # group joins its gloo threads holding the GIL, and a thread that needs the GIL to free a
    # tensor then deadlocks the exit (torch 2.13; pytorch/pytorch#56297).
    gc.collect()
    dist.destroy_process_group()
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
