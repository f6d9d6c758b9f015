"""The axolotl-style YAML config: the subset the built-in trainer understands, checked up front.

A typo must fail at start with a message naming the key, not at step 4000 with a traceback.
Keys axolotl knows but we do not are listed once as ignored (they still matter when axolotl
itself is installed and runs the config).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

TINY_RANDOM = "tiny-random"
EXAMPLES_DIR = Path(__file__).parent / "examples"  # shipped as package data (*.yaml, *.txt)
DEFAULT_EXAMPLE = "tiny-lora"

_KNOWN = {
    "base_model", "adapter", "lora_r", "lora_alpha", "lora_dropout", "lora_target_modules",
    "lora_target_linear", "sequence_len", "micro_batch_size", "gradient_accumulation_steps",
    "num_epochs", "max_steps", "learning_rate", "datasets", "output_dir", "save_steps", "seed",
    "lr_scheduler", "warmup_steps", "weight_decay", "logging_steps", "save_total_limit",
    "optimizer", "max_grad_norm",
}  # fmt: skip


class ConfigError(ValueError):
    """The config is unusable; the message says which key and what to write instead."""


@dataclass(frozen=True)
class DatasetSpec:
    path: Path
    type: str  # "completion" (a text field or plain lines) or "alpaca"
    field: str = "text"


@dataclass(frozen=True)
class AxolotlConfig:
    source: Path
    raw: dict[str, Any]
    base_model: str
    lora_r: int
    lora_alpha: int
    lora_dropout: float
    lora_target_modules: list[str] | str
    sequence_len: int
    micro_batch_size: int
    gradient_accumulation_steps: int
    num_epochs: float
    max_steps: int
    learning_rate: float
    datasets: list[DatasetSpec]
    output_dir: str
    save_steps: int
    seed: int
    lr_scheduler: str
    warmup_steps: int
    weight_decay: float
    logging_steps: int
    save_total_limit: int | None
    optimizer: str
    max_grad_norm: float

    @property
    def ignored_keys(self) -> list[str]:
        return sorted(set(self.raw) - _KNOWN)


def resolve_config_path(name_or_path: str | None) -> Path:
    """A file path, or the name of a shipped example (`tiny-lora`)."""
    candidate = Path(name_or_path) if name_or_path else None
    if candidate is not None and candidate.is_file():
        return candidate
    name = (name_or_path or DEFAULT_EXAMPLE).removesuffix(".yaml")
    shipped = EXAMPLES_DIR / f"{name}.yaml"
    if shipped.is_file():
        return shipped
    raise ConfigError(
        f"config {name_or_path!r} is neither a file nor a shipped example; "
        f"pass a path to a YAML file or --config {DEFAULT_EXAMPLE}"
    )


def load_config(path: Path) -> AxolotlConfig:
    try:
        raw = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as error:
        raise ConfigError(f"cannot read {path}: {error}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path} must be a YAML mapping of keys (base_model: ..., ...)")
    return parse_config(raw, path)


def parse_config(raw: dict[str, Any], source: Path) -> AxolotlConfig:
    adapter = raw.get("adapter", "lora")
    if adapter != "lora":
        raise ConfigError(
            f"adapter: {adapter!r} is not supported by the built-in trainer; use adapter: lora "
            "(or install axolotl, which this template then runs instead)"
        )
    max_steps = _int(raw, "max_steps", -1, minimum=-1)
    num_epochs = _number(raw, "num_epochs", 1.0 if max_steps < 0 else 0.0)
    if max_steps <= 0 and num_epochs <= 0:
        raise ConfigError("set max_steps (a positive whole number) or num_epochs (> 0)")
    target_linear = raw.get("lora_target_linear") is True
    return AxolotlConfig(
        source=source,
        raw=raw,
        base_model=_text(raw, "base_model", None),
        lora_r=_int(raw, "lora_r", 8),
        lora_alpha=_int(raw, "lora_alpha", 16),
        lora_dropout=_number(raw, "lora_dropout", 0.0, maximum=1.0),
        lora_target_modules="all-linear" if target_linear else _modules(raw),
        sequence_len=_int(raw, "sequence_len", 512, minimum=2),
        micro_batch_size=_int(raw, "micro_batch_size", 1),
        gradient_accumulation_steps=_int(raw, "gradient_accumulation_steps", 1),
        num_epochs=num_epochs,
        max_steps=max_steps,
        learning_rate=_number(raw, "learning_rate", 2e-4),
        datasets=_datasets(raw, source.parent),
        output_dir=_text(raw, "output_dir", "outputs"),
        save_steps=_int(raw, "save_steps", 100),
        seed=_int(raw, "seed", 42, minimum=0),
        lr_scheduler=_text(raw, "lr_scheduler", "cosine"),
        warmup_steps=_int(raw, "warmup_steps", 0, minimum=0),
        weight_decay=_number(raw, "weight_decay", 0.0),
        logging_steps=_int(raw, "logging_steps", 1),
        save_total_limit=_optional_int(raw, "save_total_limit"),
        optimizer=_text(raw, "optimizer", "adamw_torch"),
        max_grad_norm=_number(raw, "max_grad_norm", 1.0),
    )


def _text(raw: dict[str, Any], key: str, default: str | None) -> str:
    value = raw.get(key, default)
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{key} must be a non-empty string, got {value!r}")
    return value.strip()


def _int(raw: dict[str, Any], key: str, default: int, minimum: int = 1) -> int:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{key} must be a whole number >= {minimum}, got {value!r}")
    return value


def _optional_int(raw: dict[str, Any], key: str) -> int | None:
    return None if raw.get(key) is None else _int(raw, key, 1)


def _number(raw: dict[str, Any], key: str, default: float, maximum: float | None = None) -> float:
    value = raw.get(key, default)
    if isinstance(value, str):  # YAML 1.1 reads `2e-4` (no dot) as a string
        with contextlib.suppress(ValueError):
            value = float(value)
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ConfigError(f"{key} must be a number >= 0, got {value!r}")
    if maximum is not None and value > maximum:
        raise ConfigError(f"{key} must be at most {maximum}, got {value!r}")
    return float(value)


def _modules(raw: dict[str, Any]) -> list[str]:
    value = raw.get("lora_target_modules", ["q_proj", "v_proj"])
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise ConfigError(
            f"lora_target_modules must be a list of module names such as [q_proj, v_proj], "
            f"got {value!r}"
        )
    return list(value)


def _datasets(raw: dict[str, Any], base: Path) -> list[DatasetSpec]:
    entries = raw.get("datasets")
    if isinstance(entries, str | dict):
        entries = [entries]
    if not isinstance(entries, list) or not entries:
        raise ConfigError("datasets must list at least one local file: datasets: [{path: x.jsonl}]")
    return [_dataset(entry, base) for entry in entries]


def _dataset(entry: Any, base: Path) -> DatasetSpec:
    if isinstance(entry, str):
        entry = {"path": entry}
    if not isinstance(entry, dict) or not isinstance(entry.get("path"), str):
        raise ConfigError(f"each dataset needs a path: {{path: data.jsonl}}, got {entry!r}")
    kind = entry.get("type", "completion")
    if kind not in ("completion", "alpaca"):
        raise ConfigError(
            f"dataset type {kind!r} is not supported by the built-in trainer; "
            "use completion (jsonl with a text field, or a .txt file) or alpaca"
        )
    path = Path(entry["path"]).expanduser()
    path = path if path.is_absolute() else base / path
    if not path.is_file():
        raise ConfigError(
            f"dataset {entry['path']!r} not found (looked at {path}); datasets must be local "
            "files (.jsonl or .txt), relative paths are relative to the config file"
        )
    return DatasetSpec(path=path, type=kind, field=str(entry.get("field", "text")))
