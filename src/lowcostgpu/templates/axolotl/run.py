"""Template `axolotl`: LoRA fine-tuning from an axolotl YAML that survives interruptions.

With the `axolotl` package installed, axolotl itself runs the config (plus our callback as a
plugin, and the newest complete checkpoint as resume point). Without it, a built-in trainer
(transformers Trainer + peft LoRA + LowcostgpuTrainerCallback) runs the common subset of keys.
Checkpoints, the final adapter and the run's config live under $LOWCOSTGPU_VOLUME/output_dir.

    python -m lowcostgpu.templates.axolotl --config tiny-lora      # the shipped example
    python -m lowcostgpu.templates.axolotl --config my-run.yaml
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import sys
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

import yaml

from lowcostgpu.sdk.durable import atomic_write_bytes, fsync_dir, fsync_tree
from lowcostgpu.sdk.integrations import EXIT_INTERRUPTED
from lowcostgpu.templates._runtime import Workload, fail, say, start_workload
from lowcostgpu.templates.axolotl.config import (
    TINY_RANDOM,
    AxolotlConfig,
    ConfigError,
    load_config,
    resolve_config_path,
)

PLUGIN = "lowcostgpu.templates.axolotl.plugin.LowcostgpuAxolotlPlugin"
FINAL_DIR = "final"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m lowcostgpu.templates.axolotl")
    parser.add_argument(
        "--config", default=None, help="axolotl YAML file, or a shipped example name (tiny-lora)"
    )
    parser.add_argument("--builtin", action="store_true", help="ignore an installed axolotl")
    parser.add_argument("--step-delay-s", type=float, default=0.0, help="slow steps down (demos)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    work = start_workload()
    try:
        config_path = resolve_config_path(args.config)
        if not args.builtin and importlib.util.find_spec("axolotl") is not None:
            run_axolotl(config_path, work)
        cfg = load_config(config_path)
        return train_builtin(cfg, work, args.step_delay_s)
    except ConfigError as error:
        fail(str(error))


def output_dir_on(volume: Path, output_dir: str) -> Path:
    """Relative output dirs live on the volume: that is what survives an interruption."""
    path = Path(output_dir).expanduser()
    return path if path.is_absolute() else volume / path


def train_builtin(cfg: AxolotlConfig, work: Workload, step_delay_s: float = 0.0) -> int:
    # Heavy imports only here: a config error is reported in well under a second.
    from lowcostgpu.templates.axolotl.train import build_trainer

    if cfg.ignored_keys:
        say(f"ignoring keys the built-in trainer does not use: {', '.join(cfg.ignored_keys)}")
    output_dir = output_dir_on(work.volume, cfg.output_dir)
    run = build_trainer(cfg, output_dir, work, step_delay_s)
    if run.resume_step is not None:
        say(f"resumed from step {run.resume_step} (restart {work.env.restart_count})")
    else:
        say(f"starting {cfg.base_model} LoRA fine-tune, checkpoints in {output_dir}")
    if work.notice.requested:  # the notice came while loading: nothing new to save
        say(f"checkpoint step {run.resume_step or 0} on volume (stopped before training)")
        return EXIT_INTERRUPTED
    run.trainer.train(resume_from_checkpoint=run.resume_from)
    if run.callback.interrupted:
        say(f"checkpoint step {run.callback.last_saved_step} on volume")
        return EXIT_INTERRUPTED
    step = run.trainer.state.global_step
    final = save_final(run.trainer.model, run.tokenizer, output_dir, cfg, step)
    work.metadata.report_complete(step)
    say(f"done step {step}, adapter in {final}")
    return 0


def save_final(model: Any, tokenizer: Any, output_dir: Path, cfg: AxolotlConfig, step: int) -> Path:
    """The adapter (and, for tiny-random, the base it needs) as `final/`, swapped in whole."""
    tmp = output_dir / f".tmp-{FINAL_DIR}-{uuid.uuid4().hex[:8]}"
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    if cfg.base_model == TINY_RANDOM:
        model.get_base_model().save_pretrained(tmp / "base_model")
    summary = {"step": step, "base_model": cfg.base_model, "config": str(cfg.source)}
    (tmp / "lowcostgpu-run.json").write_text(json.dumps(summary, indent=1))
    fsync_tree(tmp)
    return _swap_in(tmp, output_dir / FINAL_DIR)


def _swap_in(tmp: Path, final: Path) -> Path:
    old = None
    if final.exists():
        old = final.with_name(f".tmp-old-{final.name}-{uuid.uuid4().hex[:8]}")
        final.rename(old)
    tmp.rename(final)
    fsync_dir(final.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return final


def axolotl_config(config_path: Path, volume: Path, resume_from: str | None) -> dict[str, Any]:
    """The user's config, pointed at the volume, with our callback plugged in."""
    try:
        raw = yaml.safe_load(config_path.read_text())
    except (OSError, yaml.YAMLError) as error:
        raise ConfigError(f"cannot read {config_path}: {error}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{config_path} must be a YAML mapping of keys")
    derived = dict(raw)
    derived["output_dir"] = str(output_dir_on(volume, str(raw.get("output_dir", "outputs"))))
    derived["plugins"] = [*(raw.get("plugins") or []), PLUGIN]
    derived["datasets"] = [_absolute(d, config_path.parent) for d in raw.get("datasets") or []]
    derived.pop("auto_resume_from_checkpoints", None)  # it may pick a half-written checkpoint
    if resume_from is not None:
        derived["resume_from_checkpoint"] = resume_from
    return derived


def _absolute(dataset: Any, base: Path) -> Any:
    if isinstance(dataset, dict) and isinstance(dataset.get("path"), str):
        local = base / dataset["path"]
        if not Path(dataset["path"]).is_absolute() and local.exists():
            return {**dataset, "path": str(local)}
    return dataset


def run_axolotl(config_path: Path, work: Workload) -> NoReturn:
    """Replace this process by `python -m axolotl.cli.train` (same pid: signals reach it)."""
    from lowcostgpu.sdk.integrations.hf import checkpoint_step, latest_complete_checkpoint

    raw_output = yaml.safe_load(config_path.read_text() or "{}") or {}
    output_dir = output_dir_on(work.volume, str(raw_output.get("output_dir", "outputs")))
    resume_from = latest_complete_checkpoint(output_dir)
    derived = axolotl_config(config_path, work.volume, resume_from)
    output_dir.mkdir(parents=True, exist_ok=True)
    derived_path = output_dir / "lowcostgpu-axolotl.yaml"
    atomic_write_bytes(derived_path, yaml.safe_dump(derived, sort_keys=False).encode())
    if resume_from is not None:
        step = checkpoint_step(Path(resume_from))
        say(f"resumed from step {step} (restart {work.env.restart_count})")
    say(f"running axolotl on {derived_path}")
    sys.stdout.flush()
    if work.notice.requested:  # a notice during start-up: nothing trained, nothing to save
        raise SystemExit(EXIT_INTERRUPTED)
    os.execv(sys.executable, [sys.executable, "-m", "axolotl.cli.train", str(derived_path)])
