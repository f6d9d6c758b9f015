"""A tiny HF Trainer job with LowcostgpuTrainerCallback, run as a subprocess by the tests.

It resumes from latest_complete_checkpoint(output_dir), prints `step N` after every optimizer
step (sleeping `--sleep-s` so that a test can signal it mid-run), and at the end writes the final
weights and the loss log to `--result`. Exit status: 0 finished, 143 stopped by a notice.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import torch
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)

from lowcostgpu.sdk.integrations import EXIT_INTERRUPTED
from lowcostgpu.sdk.integrations.hf import LowcostgpuTrainerCallback, latest_complete_checkpoint
from lowcostgpu.sdk.notice import StopNotice

VOCAB = 64
SEQ_LEN = 16


def tiny_model() -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=SEQ_LEN,
        attention_dropout=0.1,  # dropout draws random numbers: the RNG restore is exercised
    )
    return LlamaForCausalLM(config)


def dataset(n: int = 20) -> list[dict[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(1)
    rows = torch.randint(0, VOCAB, (n, SEQ_LEN), generator=generator)
    return [{"input_ids": row, "labels": row.clone()} for row in rows]


class Progress(TrainerCallback):
    def __init__(self, sleep_s: float) -> None:
        self.sleep_s = sleep_s

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        print(f"step {state.global_step}", flush=True)
        time.sleep(self.sleep_s)


def main(argv: list[str] | None = None, notice: StopNotice | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--output-dir", required=True)
    parser.add_argument("--result", required=True)
    parser.add_argument("--max-steps", type=int, default=24)
    parser.add_argument("--save-steps", type=int, default=5)
    parser.add_argument("--sleep-s", type=float, default=0.0)
    opts = parser.parse_args(argv)
    args = TrainingArguments(
        output_dir=opts.output_dir,
        max_steps=opts.max_steps,
        per_device_train_batch_size=4,
        learning_rate=5e-3,
        lr_scheduler_type="linear",
        save_steps=opts.save_steps,
        logging_steps=1,
        seed=7,
        report_to=[],
        use_cpu=True,
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
    callback = LowcostgpuTrainerCallback(notice=notice)
    trainer = Trainer(
        model=tiny_model(),
        args=args,
        train_dataset=dataset(),
        callbacks=[callback, Progress(opts.sleep_s)],
    )
    resume = latest_complete_checkpoint(opts.output_dir)
    print(f"resume {resume}", flush=True)
    trainer.train(resume_from_checkpoint=resume)
    losses = [(e["step"], e["loss"]) for e in trainer.state.log_history if "loss" in e]
    weights = {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}
    torch.save(
        {"losses": losses, "weights": weights, "step": trainer.state.global_step}, opts.result
    )
    if callback.interrupted:
        print(f"interrupted at step {callback.last_saved_step}", flush=True)
        return EXIT_INTERRUPTED
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    sys.exit(main())
