"""The built-in trainer: transformers Trainer + peft LoRA + LowcostgpuTrainerCallback.

Exact resume rests on the Trainer: it restores weights, optimizer, scheduler and every RNG
(torch, CUDA, NumPy, Python) from checkpoint-N, and its seedable sampler replays the epoch's
shuffle order, skipping the batches already trained. The base model of `tiny-random` is rebuilt
from the seed, so a restart needs only the adapter's checkpoint.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import (
    PreTrainedTokenizerBase,
    PrinterCallback,
    Trainer,
    TrainerCallback,
    TrainingArguments,
    set_seed,
)

from lowcostgpu.sdk.integrations.hf import (
    LowcostgpuTrainerCallback,
    checkpoint_step,
    latest_complete_checkpoint,
)
from lowcostgpu.templates._runtime import Workload, say
from lowcostgpu.templates.axolotl.config import AxolotlConfig, ConfigError
from lowcostgpu.templates.axolotl.data import packed_blocks, read_samples
from lowcostgpu.templates.axolotl.model import load_base, with_lora


@dataclass
class BuiltRun:
    trainer: Trainer
    callback: LowcostgpuTrainerCallback
    tokenizer: PreTrainedTokenizerBase
    resume_from: str | None
    resume_step: int | None


class Progress(TrainerCallback):
    """`step N loss X` lines (the runtime's log is what a user sees); optional demo delay.

    Listed before LowcostgpuTrainerCallback so that a SIGTERM arriving during the delay is seen
    at the end of that same step.
    """

    def __init__(self, step_delay_s: float) -> None:
        self.step_delay_s = step_delay_s

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.step_delay_s > 0:
            time.sleep(self.step_delay_s)

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
        if logs and "loss" in logs:
            say(f"step {state.global_step} loss {float(logs['loss']):.6f}")


def training_arguments(cfg: AxolotlConfig, output_dir: Path) -> TrainingArguments:
    try:
        return TrainingArguments(
            output_dir=str(output_dir),
            per_device_train_batch_size=cfg.micro_batch_size,
            gradient_accumulation_steps=cfg.gradient_accumulation_steps,
            learning_rate=cfg.learning_rate,
            num_train_epochs=cfg.num_epochs,
            max_steps=cfg.max_steps,
            lr_scheduler_type=cfg.lr_scheduler,
            warmup_steps=cfg.warmup_steps,
            weight_decay=cfg.weight_decay,
            optim=cfg.optimizer,
            max_grad_norm=cfg.max_grad_norm,
            save_strategy="steps",
            save_steps=cfg.save_steps,
            save_total_limit=cfg.save_total_limit,
            logging_steps=cfg.logging_steps,
            seed=cfg.seed,
            report_to=[],
            use_cpu=not torch.cuda.is_available(),
            dataloader_num_workers=0,
            disable_tqdm=True,
        )
    except ValueError as error:  # an unknown lr_scheduler or optimizer name
        raise ConfigError(f"config rejected by transformers: {error}") from None


def build_trainer(
    cfg: AxolotlConfig, output_dir: Path, work: Workload, step_delay_s: float
) -> BuiltRun:
    model, tokenizer = load_base(cfg)
    texts = [text for spec in cfg.datasets for text in read_samples(spec)]
    blocks = packed_blocks(texts, tokenizer, cfg.sequence_len)
    args = training_arguments(cfg, output_dir)
    set_seed(cfg.seed)  # the LoRA init draws random numbers: same seed, same adapter at step 0
    peft_model = with_lora(model, cfg)
    callback = LowcostgpuTrainerCallback(
        notice=work.notice, metadata=work.metadata, report_complete=False
    )
    trainer = Trainer(
        model=peft_model,
        args=args,
        train_dataset=blocks,
        callbacks=[Progress(step_delay_s), callback],
    )
    trainer.remove_callback(PrinterCallback)  # Progress prints the lines we want
    resume_from = latest_complete_checkpoint(output_dir)
    resume_step = checkpoint_step(Path(resume_from)) if resume_from else None
    return BuiltRun(trainer, callback, tokenizer, resume_from, resume_step)
