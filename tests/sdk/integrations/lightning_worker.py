"""A tiny Lightning job with LowcostgpuLightningCallback, run as a subprocess by the tests.

Prints `step N` after every optimizer step (sleeping `--sleep-s` so a test can signal it), and
writes the final weights plus the sample ids each step trained on to `--result`. Exit status:
0 finished, 143 stopped by a notice.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.utilities.exceptions import SIGTERMException
from torch.utils.data import DataLoader, TensorDataset

from lowcostgpu.sdk.integrations import EXIT_INTERRUPTED
from lowcostgpu.sdk.integrations.lightning import LowcostgpuLightningCallback, latest_checkpoint
from lowcostgpu.sdk.notice import StopNotice

ROWS = 24
BATCH = 4  # 6 steps an epoch


class Tiny(pl.LightningModule):
    def __init__(self, sleep_s: float, notice: StopNotice | None = None, stop_at: int = -1) -> None:
        super().__init__()
        self.notice = notice
        self.stop_at = stop_at
        self.net = torch.nn.Sequential(
            torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Dropout(0.2), torch.nn.Linear(16, 1)
        )
        self.sleep_s = sleep_s
        self.seen: list[tuple[int, list[int]]] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        ids, x, y = batch
        self.seen.append((self.global_step, ids.tolist()))
        if self.notice is not None and self.global_step == self.stop_at:
            self.notice.request("a notice from the metadata endpoint, no SIGTERM")
        return torch.nn.functional.mse_loss(self.net(x), y)

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        print(f"step {self.global_step}", flush=True)
        time.sleep(self.sleep_s)

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.AdamW(self.parameters(), lr=1e-2)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=5, gamma=0.5)
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "interval": "step"},
        }


def loader() -> DataLoader[Any]:
    generator = torch.Generator().manual_seed(3)
    x = torch.randn(ROWS, 4, generator=generator)
    y = x.sum(dim=1, keepdim=True)
    return DataLoader(TensorDataset(torch.arange(ROWS), x, y), batch_size=BATCH, shuffle=True)


def main(argv: list[str] | None = None, notice: StopNotice | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dirpath", required=True)
    parser.add_argument("--result", required=True)
    parser.add_argument("--max-steps", type=int, default=15)
    parser.add_argument("--every-n-steps", type=int, default=None)
    parser.add_argument("--keep-last", type=int, default=2)
    parser.add_argument("--request-stop-at", type=int, default=-1)
    parser.add_argument("--sleep-s", type=float, default=0.0)
    opts = parser.parse_args(argv)
    pl.seed_everything(11, verbose=False)
    model = Tiny(opts.sleep_s, notice, opts.request_stop_at)
    callback = LowcostgpuLightningCallback(
        opts.dirpath, every_n_steps=opts.every_n_steps, keep_last=opts.keep_last, notice=notice
    )
    trainer = pl.Trainer(
        max_steps=opts.max_steps,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[callback],
    )
    resume = latest_checkpoint(opts.dirpath)
    print(f"resume {resume}", flush=True)
    # Lightning ends fit with SIGTERMException (a SystemExit of status 0) after a SIGTERM.
    with contextlib.suppress(SIGTERMException):
        trainer.fit(model, train_dataloaders=loader(), ckpt_path=resume)
    weights = {k: v.detach().clone() for k, v in model.state_dict().items()}
    result = {"weights": weights, "seen": model.seen, "step": trainer.global_step}
    torch.save(result, opts.result)
    if callback.interrupted:
        print(f"interrupted at step {callback.last_saved_step}", flush=True)
        return EXIT_INTERRUPTED
    return 0


if __name__ == "__main__":
    sys.exit(main())
