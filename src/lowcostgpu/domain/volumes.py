"""Volume specs as users write them: `ckpts:50GB` — one grammar for the API, the CLI and the client.

    spec = NAME ":" SIZE UNIT
    NAME = [A-Za-z0-9] [A-Za-z0-9_-]{0,62}
    SIZE = [0-9]+ (ASCII digits only, 1 to MAX_SIZE_GB)
    UNIT = "GB" (any case)

Nothing else: no whitespace anywhere (not even a trailing newline), no control characters, no
other digits (a full-width `０１` is not a number here), no missing or other unit. A spec that
slipped through once was stored and then failed at start; refusing it at the edge with an
example says what to write instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from lowcostgpu.domain.errors import InvalidRequest

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,62}", re.ASCII)
SPEC = re.compile(r"(?P<name>[^:]*):(?P<size>[0-9]{1,12})(?P<unit>[A-Za-z]*)", re.ASCII)
UNITS = frozenset({"gb"})
MAX_SIZE_GB = 100_000
MAX_SPEC_CHARS = 100
HINT = "write it as NAME:SIZE with a size in GB, e.g. ckpts:50GB"


@dataclass(frozen=True, slots=True)
class VolumeSpec:
    name: str
    size_gb: int


def parse_volume_spec(text: str) -> VolumeSpec:
    """`NAME:SIZEGB` → a spec; anything else is refused with what was wrong and an example."""
    if not isinstance(text, str) or len(text) > MAX_SPEC_CHARS:
        shown = text[:40] + "…" if isinstance(text, str) else type(text).__name__
        raise InvalidRequest(f"volume {shown!r} is not a volume spec", hint=HINT)
    match = SPEC.fullmatch(text)
    if match is None:
        raise InvalidRequest(f"cannot read volume {text!r}", hint=HINT)
    name, unit = match["name"], match["unit"]
    if not NAME.fullmatch(name):
        raise InvalidRequest(
            f"volume name {name!r} is not allowed",
            hint="use letters, digits, '-' and '_', at most 63 characters, e.g. ckpts:50GB",
        )
    if unit.lower() not in UNITS:
        what = f"unit {unit!r} is not known" if unit else "has no unit"
        raise InvalidRequest(f"the size of volume {text!r} {what}", hint=HINT)
    size_gb = int(match["size"])
    if not 1 <= size_gb <= MAX_SIZE_GB:
        raise InvalidRequest(f"volume size must be 1 to {MAX_SIZE_GB} GB, got {size_gb}", hint=HINT)
    return VolumeSpec(name, size_gb)
