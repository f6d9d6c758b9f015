"""Volume specs as users write them: `ckpts:50GB`."""

from __future__ import annotations

import re
from dataclasses import dataclass

from lowcostgpu.domain.errors import InvalidRequest

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$")
SPEC = re.compile(r"^(?P<name>[^:]+):(?P<size>\d+)\s*(?P<unit>GB|G|GiB)?$", re.IGNORECASE)
MAX_SIZE_GB = 100_000


@dataclass(frozen=True, slots=True)
class VolumeSpec:
    name: str
    size_gb: int


def parse_volume_spec(text: str) -> VolumeSpec:
    """`NAME:SIZE[GB]` → a spec; anything else is refused with an example."""
    match = SPEC.match(text.strip())
    hint = "write it as NAME:SIZE, e.g. ckpts:50GB"
    if match is None:
        raise InvalidRequest(f"cannot read volume {text!r}", hint=hint)
    name, size_gb = match["name"], int(match["size"])
    if not NAME.match(name):
        raise InvalidRequest(
            f"volume name {name!r} is not allowed",
            hint="use letters, digits, '-' and '_', at most 63 characters, e.g. ckpts:50GB",
        )
    if not 1 <= size_gb <= MAX_SIZE_GB:
        raise InvalidRequest(f"volume size must be 1 to {MAX_SIZE_GB} GB, got {size_gb}", hint=hint)
    return VolumeSpec(name, size_gb)
