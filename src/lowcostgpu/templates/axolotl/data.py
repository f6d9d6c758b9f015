"""Local datasets to fixed-length blocks, and the byte tokenizer of the `tiny-random` model.

Packing (all samples joined with BOS/EOS, cut into sequence_len blocks) keeps every block the
same length, so batches need no padding and the step count is fixed for a given corpus.
"""

from __future__ import annotations

import json
from typing import Any

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerBase, PreTrainedTokenizerFast

from lowcostgpu.templates.axolotl.config import ConfigError, DatasetSpec

BOS, EOS, PAD = "<s>", "</s>", "<pad>"


def _byte_alphabet() -> dict[int, str]:
    """Byte → printable character, the byte-level convention (printable bytes map to
    themselves, the rest to code points from 256 on), so the ByteLevel pre-tokenizer matches."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    mapping = {byte: chr(byte) for byte in printable}
    extra = 0
    for byte in range(256):
        if byte not in mapping:
            mapping[byte] = chr(256 + extra)
            extra += 1
    return mapping


def byte_tokenizer() -> PreTrainedTokenizerFast:
    """256 byte tokens + BOS/EOS/PAD, no merges: any text round-trips; nothing to download."""
    vocab = {char: byte for byte, char in _byte_alphabet().items()}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core)  # type: ignore[no-untyped-call]
    tokenizer.add_special_tokens({"bos_token": BOS, "eos_token": EOS, "pad_token": PAD})
    return tokenizer


def read_samples(spec: DatasetSpec) -> list[str]:
    """Texts from a .txt (one sample a non-empty line) or a .jsonl (one JSON object a line)."""
    lines = spec.path.read_text(encoding="utf-8").splitlines()
    if spec.path.suffix != ".jsonl":
        return [line.strip() for line in lines if line.strip()]
    samples = []
    for number, line in enumerate(lines, start=1):
        if line.strip():
            samples.append(_jsonl_text(spec, number, line))
    return samples


def _jsonl_text(spec: DatasetSpec, number: int, line: str) -> str:
    where = f"{spec.path}:{number}"
    try:
        row = json.loads(line)
    except ValueError as error:
        raise ConfigError(f"{where} is not valid JSON: {error}") from None
    if not isinstance(row, dict):
        raise ConfigError(f"{where} must be a JSON object")
    if spec.type == "alpaca":
        return _alpaca(row, where)
    text = row.get(spec.field)
    if not isinstance(text, str):
        raise ConfigError(f'{where} has no string field "{spec.field}" (set field: in datasets)')
    return text


def _alpaca(row: dict[str, Any], where: str) -> str:
    if not isinstance(row.get("instruction"), str) or not isinstance(row.get("output"), str):
        raise ConfigError(f"{where}: alpaca rows need string instruction and output fields")
    prompt = f"### Instruction:\n{row['instruction']}\n\n"
    if row.get("input"):
        prompt += f"### Input:\n{row['input']}\n\n"
    return f"{prompt}### Response:\n{row['output']}"


def packed_blocks(
    texts: list[str], tokenizer: PreTrainedTokenizerBase, sequence_len: int
) -> list[dict[str, torch.Tensor]]:
    """Tokenize, join with BOS/EOS, cut into sequence_len blocks (a short tail is dropped)."""
    ids: list[int] = []
    bos, eos = tokenizer.bos_token_id, tokenizer.eos_token_id
    for text in texts:
        encoded = tokenizer(text, add_special_tokens=False)["input_ids"]
        ids += ([bos] if bos is not None else []) + encoded + ([eos] if eos is not None else [])
    blocks = len(ids) // sequence_len
    if blocks == 0:
        raise ConfigError(
            f"the datasets hold {len(ids)} tokens, fewer than one sequence_len ({sequence_len}); "
            "add data or lower sequence_len"
        )
    rows = torch.tensor(ids[: blocks * sequence_len]).view(blocks, sequence_len)
    return [{"input_ids": row, "labels": row.clone()} for row in rows]
