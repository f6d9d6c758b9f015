"""The GPU catalog: GPU types, their on-demand prices, and the storage price.

The catalog is data (a TOML file), not code. This module parses its text; reading the file is the
shell's job (`lowcostgpu.adapters.files`), so parsing stays pure and testable.
"""

from __future__ import annotations

import difflib
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from lowcostgpu.domain.errors import ConfigError, InvalidRequest, NotFound
from lowcostgpu.domain.money import Money, interruptible_rate, parse_decimal

GPU_NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9-]{0,40}$")
# Unknown keys are refused, not ignored: a misspelt `on_demand_per_gpu_hours` silently ignored
# would leave a price the operator did not mean (as the fleet file does, domain/fleet.py).
TOP_KEYS = ("gpu", "storage")
GPU_KEYS = ("display_name", "memory_gb", "on_demand_per_gpu_hour")
STORAGE_KEYS = ("per_gb_month",)


@dataclass(frozen=True, slots=True)
class GpuType:
    name: str
    display_name: str
    memory_gb: int
    on_demand_per_gpu_hour: Money

    @property
    def interruptible_per_gpu_hour(self) -> Money:
        return interruptible_rate(self.on_demand_per_gpu_hour)


@dataclass(frozen=True, slots=True)
class Catalog:
    gpu_types: Mapping[str, GpuType]
    storage_per_gb_month: Money

    def gpu(self, name: str) -> GpuType:
        """Look a GPU type up by its canonical name (a stored one: a usage record's resource, a
        pool's type); an unknown name lists the known ones. A name a user typed goes through
        `resolve_gpu` instead, which also accepts case, prefixes and short names."""
        try:
            return self.gpu_types[name]
        except KeyError:
            known = ", ".join(sorted(self.gpu_types))
            raise NotFound(
                f"unknown GPU type {name!r}",
                hint=f"use one of: {known} (see `lowcostgpu prices`)",
            ) from None

    def resolve_gpu(self, typed: str) -> GpuType:
        """The GPU type a user means by `typed`: the one resolver of every request that names a
        GPU type (launch, clusters), so that `A100-SXM4`, `a100` and `5090` mean the same
        everywhere and the canonical name is what gets stored and shown.

        Exact names cost O(1); anything else O(GPU types): see `gpu_matches`. Ambiguous →
        InvalidRequest listing the matches; no match → NotFound with the closest name.
        """
        exact = self.gpu_types.get(typed)
        if exact is not None:
            return exact
        matches = gpu_matches(typed, self.gpu_types.values())
        if len(matches) == 1:
            return self.gpu_types[matches[0]]
        if matches:
            raise InvalidRequest(
                f"GPU type {typed!r} is ambiguous: it matches {', '.join(matches)}",
                hint=f"give more of the name, e.g. {matches[0]}",
            )
        raise NotFound(f"unknown GPU type {typed!r}", hint=self._unknown_hint(typed))

    def _unknown_hint(self, typed: str) -> str:
        """`did you mean` the closest of every form a type may be typed as (difflib), the
        forms several types share (`rtx`) left out; then the known types."""
        known = ", ".join(sorted(self.gpu_types))
        owners: dict[str, set[str]] = {}
        for g in self.gpu_types.values():
            parts = g.name.split("-")
            heads = ["".join(parts[: i + 1]) for i in range(len(parts))]
            for form in [*heads, *_forms(g)]:
                owners.setdefault(_compact(form), set()).add(g.name)
        names = {form: next(iter(o)) for form, o in owners.items() if len(o) == 1}
        close = difflib.get_close_matches(_compact(typed), list(names), n=1, cutoff=0.6)
        guess = f"did you mean {names[close[0]]}? " if close else ""
        return f"{guess}known types: {known}; see `lowcostgpu prices`"


def gpu_matches(typed: str, gpu_types: Iterable[GpuType]) -> list[str]:
    """The canonical names `typed` may stand for, sorted: case and separators (space, `_`, `-`)
    ignored, a match being a prefix of the whole name, of its display name or of a tail that
    starts at a dash (`a100` → a100-sxm4, `5090` → rtx-5090, `sxm4` → a100-sxm4). A name that
    equals one type's name or display name exactly (so written) wins over longer prefixes."""
    key = _compact(typed)
    if not key:
        return []
    types = list(gpu_types)
    whole = [g.name for g in types if key in (_compact(g.name), _compact(g.display_name))]
    if whole:
        return sorted(whole)
    return sorted(g.name for g in types if any(f.startswith(key) for f in _forms(g)))


def _forms(gpu: GpuType) -> list[str]:
    parts = gpu.name.split("-")
    tails = [_compact("".join(parts[i:])) for i in range(len(parts))]
    return [*tails, _compact(gpu.display_name)]


def _compact(name: str) -> str:
    """A name with case and separators dropped: `A100 SXM4`, `a100_sxm4` → `a100sxm4`."""
    return re.sub(r"[\s_-]+", "", name.casefold())


def parse_catalog(text: str, *, source: str = "catalog") -> Catalog:
    """Parse catalog TOML; every error names the source and the entry that is wrong."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source}: not valid TOML: {exc}", source=source) from None
    _refuse_unknown_keys(data, TOP_KEYS, source, f"{source}: the catalog")
    gpus = data.get("gpu")
    if not isinstance(gpus, dict) or not gpus:
        raise ConfigError(
            f"{source}: no [gpu.NAME] tables",
            hint="declare at least one GPU type, e.g. [gpu.a100-sxm4] with on_demand_per_gpu_hour",
            source=source,
        )
    gpu_types = {name: _parse_gpu(name, entry, source) for name, entry in gpus.items()}
    storage = data.get("storage", {})
    if not isinstance(storage, dict):
        raise ConfigError(
            f"{source}: [storage] must be a table",
            hint='write it as [storage] with per_gb_month = "0.10"',
            source=source,
        )
    _refuse_unknown_keys(storage, STORAGE_KEYS, source, f"{source}: [storage]")
    per_gb_month = _price(storage.get("per_gb_month"), f"{source}: [storage] per_gb_month", source)
    return Catalog(gpu_types=gpu_types, storage_per_gb_month=per_gb_month)


def _parse_gpu(name: str, entry: Any, source: str) -> GpuType:
    where = f"{source}: [gpu.{name}]"
    if not GPU_NAME_PATTERN.match(name):
        raise ConfigError(
            f"{where}: GPU type names are lower-case letters, digits and dashes", source=source
        )
    if not isinstance(entry, dict):
        raise ConfigError(f"{where} must be a table", source=source)
    _refuse_unknown_keys(entry, GPU_KEYS, source, where)
    memory_gb = entry.get("memory_gb", 0)
    if not isinstance(memory_gb, int) or memory_gb < 0:
        raise ConfigError(f"{where}: memory_gb must be a whole number ≥ 0", source=source)
    return GpuType(
        name=name,
        display_name=str(entry.get("display_name", name)),
        memory_gb=memory_gb,
        on_demand_per_gpu_hour=_price(
            entry.get("on_demand_per_gpu_hour"), f"{where} on_demand_per_gpu_hour", source
        ),
    )


def _refuse_unknown_keys(
    entry: Mapping[str, Any], known: tuple[str, ...], source: str, where: str
) -> None:
    unknown = sorted(set(entry) - set(known))
    if unknown:
        raise ConfigError(
            f"{where}: unknown key {unknown[0]!r}",
            hint=f"the keys allowed here are: {', '.join(known)}",
            source=source,
            key=unknown[0],
        )


def _price(raw: Any, where: str, source: str) -> Money:
    if raw is None:
        raise ConfigError(
            f"{where} is missing", hint='write it as a string, e.g. "0.468"', source=source
        )
    if isinstance(raw, float):
        raise ConfigError(
            f'{where} must be a string such as "{raw}" so that it stays exact, not a float',
            source=source,
        )
    try:
        value = parse_decimal(raw, what=where)
    except InvalidRequest as exc:
        raise ConfigError(exc.message, source=source) from None
    if value < 0:
        raise ConfigError(f"{where} must not be negative, got {raw!r}", source=source)
    return Money(value)
