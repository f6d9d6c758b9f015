"""How long a checkpoint blocks the training loop (sync vs async), and SIGTERM-to-exit time.

    .venv/bin/python bench/sdk_checkpoint.py              # 10M and 50M parameters, 3 repeats
    .venv/bin/python bench/sdk_checkpoint.py --sizes 10 --repeats 5 --dir /mnt/volume

"blocked" is how long `Checkpointer.save` / `save_async` held the training loop; "durable" is
until the checkpoint was fsynced, marked complete and renamed into place; "verify" is what a
restart pays to checksum the newest checkpoint before trusting it. The state is model +
AdamW moments (3 × parameters × 4 bytes). The last table starts the pytorch template, sends
SIGTERM to its process group mid-run and times until it has checkpointed and exited.
"""

from __future__ import annotations

import argparse
import re
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from lowcostgpu.sdk.checkpoint import Checkpointer
from lowcostgpu.sdk.drill import run_once, workload_env
from lowcostgpu.sdk.notice import StopNotice
from lowcostgpu.sdk.torch import TorchState


def model_of(million_params: int) -> torch.nn.Module:
    width = 1024 if million_params <= 20 else 2048
    layers = max(1, round(million_params * 1e6 / (width * width + width)))
    return torch.nn.Sequential(*(torch.nn.Linear(width, width) for _ in range(layers)))


def warm_state(million_params: int) -> TorchState:
    torch.manual_seed(0)
    model = model_of(million_params)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    width = model[0].in_features
    loss = model(torch.randn(4, width)).pow(2).mean()
    torch.autograd.backward(loss)
    optimizer.step()  # creates the AdamW moments, so the state is full size
    return TorchState(model, optimizer)


def time_saves(
    state: TorchState, mode: str, directory: Path, repeats: int
) -> tuple[float, float, float]:
    """Median (blocked_s, durable_s) over `repeats` saves, and the time to verify the last."""
    ckpt = Checkpointer(directory / mode, keep_last=1, notice=StopNotice())
    blocked, durable = [], []
    for step in range(1, repeats + 1):
        started = time.perf_counter()
        if mode == "sync":
            ckpt.save(step, lambda d, s=step: state.save(d, s))
        elif mode == "thread":
            ckpt.save_async(step, lambda d, s=step: state.stage(d, s))
        else:
            ckpt.save_async(step, lambda d, s=step: state.save_dcp_async(d, s))
        blocked.append(time.perf_counter() - started)
        ckpt.wait()
        durable.append(time.perf_counter() - started)
    started = time.perf_counter()
    assert ckpt.latest() is not None  # what a restart does first: checksum the newest one
    return statistics.median(blocked), statistics.median(durable), time.perf_counter() - started


def sigterm_to_exit(directory: Path, repeats: int, extra: list[str]) -> list[float]:
    """Seconds from SIGTERM (sent after step 50) until the template exited, per run."""
    argv = [sys.executable, "-m", "lowcostgpu.templates.pytorch", "--steps=100000", *extra]
    timings = []
    for n in range(repeats):
        run = run_once(
            argv,
            workload_env(directory / f"term-{'-'.join(extra)}-{n}", 0),
            re.compile(r"^step (\d+) "),
            signal_at=50,
            sig=signal.SIGTERM,
        )
        assert run.returncode == 0 and run.lines[-1].startswith("checkpoint step"), run.lines[-3:]
        assert run.signal_to_exit_s is not None
        timings.append(run.signal_to_exit_s)
    return timings


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 50], help="M parameters")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=None, help="where to write (a volume)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        directory = Path(tmp)
        print(f"torch {torch.__version__}, writing to {directory}, median of {args.repeats}")
        header = f"{'params':>8} {'state MB':>9} {'mode':>7} {'blocked s':>10} {'durable s':>10}"
        print(f"{header} {'verify s':>9}")
        for size in args.sizes:
            state = warm_state(size)
            params = sum(p.numel() for p in state.model.parameters())
            for mode in ("sync", "thread", "dcp"):
                blocked, durable, verify = time_saves(
                    state, mode, directory / str(size), args.repeats
                )
                state_mb = params * 4 * 3 / 1e6
                row = f"{params / 1e6:7.1f}M {state_mb:9.0f} {mode:>7}"
                print(f"{row} {blocked:10.3f} {durable:10.3f} {verify:9.3f}")
            del state
        for label, extra in (("default MLP", []), ("hidden 2048", ["--hidden=2048"])):
            timings = sigterm_to_exit(directory, args.repeats, extra)
            shown = ", ".join(f"{t:.3f}" for t in timings)
            print(
                f"pytorch template ({label}): SIGTERM to exit {statistics.median(timings):.3f} s "
                f"(runs: {shown})"
            )


if __name__ == "__main__":
    main()
