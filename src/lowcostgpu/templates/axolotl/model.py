"""The base model (built from a seed, or loaded offline from disk) with a LoRA adapter on top."""

from __future__ import annotations

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from lowcostgpu.templates.axolotl.config import TINY_RANDOM, AxolotlConfig, ConfigError
from lowcostgpu.templates.axolotl.data import byte_tokenizer


def tiny_random_model(tokenizer: PreTrainedTokenizerBase, seed: int) -> LlamaForCausalLM:
    """A 2-layer Llama of width 64 whose weights depend on `seed` only: rebuilt identically on
    every restart, so only the adapter needs checkpointing."""
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=512,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        return LlamaForCausalLM(config)
    finally:
        torch.random.set_rng_state(generator_state)


def load_base(cfg: AxolotlConfig) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """tiny-random, or a model already on this machine (hub cache or a directory); no download."""
    tokenizer: PreTrainedTokenizerBase
    if cfg.base_model == TINY_RANDOM:
        tokenizer = byte_tokenizer()
        return tiny_random_model(tokenizer, cfg.seed), tokenizer
    try:
        tokenizer = AutoTokenizer.from_pretrained(cfg.base_model, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(cfg.base_model, local_files_only=True)
    except (OSError, ValueError) as error:
        raise ConfigError(
            f"base_model {cfg.base_model!r} is not available offline ({_first_line(error)}). "
            "Workloads never download models at run time. Put it on the volume or in the image: "
            f"`huggingface-cli download {cfg.base_model} --local-dir DIR` on a machine with "
            "internet, copy DIR here and set base_model: DIR (or pre-fill HF_HOME's cache); "
            f"or use base_model: {TINY_RANDOM} to try the template"
        ) from None
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer


def with_lora(model: PreTrainedModel, cfg: AxolotlConfig) -> PeftModel:
    lora = LoraConfig(
        r=cfg.lora_r,
        lora_alpha=cfg.lora_alpha,
        lora_dropout=cfg.lora_dropout,
        target_modules=cfg.lora_target_modules,
        task_type="CAUSAL_LM",
    )
    try:
        peft_model = get_peft_model(model, lora)
    except ValueError as error:
        raise ConfigError(
            f"lora_target_modules {cfg.lora_target_modules!r} do not fit {cfg.base_model}: "
            f"{_first_line(error)}"
        ) from None
    return peft_model


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
