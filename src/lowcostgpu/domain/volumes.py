"""Volume specs as users write them: `ckpts:50GB` — one grammar for the API, the CLI and the client.

    spec = NAME [":" SIZE UNIT]
    NAME = [A-Za-z0-9] [A-Za-z0-9_-]{0,62}
    SIZE = [0-9]+ (ASCII digits only, 1 to MAX_SIZE_GB)
    UNIT = "GB" (any case)

Nothing else: no whitespace anywhere (not even a trailing newline), no control characters, no
other digits (a full-width `０１` is not a number here), no missing or other unit. A spec that
slipped through once was stored and then failed at start; refusing it at the edge with an
example says what to write instead.

A spec without a size (`ckpts`) names an existing volume of the account: the launch attaches it
at its size (and is refused if there is none yet). A spec with a size must match an existing
volume's size: a launch never resizes a volume silently (`lowcostgpu volumes resize` does).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from lowcostgpu.domain.errors import InvalidRequest

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,62}", re.ASCII)
SPEC = re.compile(r"(?P<name>[^:]*):(?P<size>[0-9]{1,12})(?P<unit>[A-Za-z]*)", re.ASCII)
SIZE = re.compile(r"(?P<size>[0-9]{1,12})(?P<unit>[A-Za-z]*)", re.ASCII)
UNITS = frozenset({"gb"})
MAX_SIZE_GB = 100_000
MAX_SPEC_CHARS = 100
HINT = "write it as NAME:SIZE with a size in GB, e.g. ckpts:50GB (or NAME for an existing one)"
SIZE_HINT = "write a whole number of GB with its unit, e.g. 100GB"


@dataclass(frozen=True, slots=True)
class VolumeSpec:
    name: str
    size_gb: int | None  # None: the existing volume of that name, at its size


def parse_volume_spec(text: str) -> VolumeSpec:
    """`NAME:SIZEGB` → a spec; anything else is refused with what was wrong and an example."""
    if not isinstance(text, str) or len(text) > MAX_SPEC_CHARS:
        shown = text[:40] + "…" if isinstance(text, str) else type(text).__name__
        raise InvalidRequest(f"volume {shown!r} is not a volume spec", hint=HINT)
    if NAME.fullmatch(text):
        return VolumeSpec(text, None)
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
    return VolumeSpec(name, check_size_gb(int(match["size"]), HINT))


def check_size_gb(size_gb: int, hint: str = SIZE_HINT) -> int:
    """A volume size in GB: a whole number from 1 to MAX_SIZE_GB."""
    if isinstance(size_gb, bool) or not 1 <= size_gb <= MAX_SIZE_GB:
        raise InvalidRequest(f"volume size must be 1 to {MAX_SIZE_GB} GB, got {size_gb}", hint=hint)
    return size_gb


def parse_size(text: str) -> int:
    """`100GB` (the unit required, any case) → 100; what `volumes resize NAME SIZE` takes."""
    match = SIZE.fullmatch(text) if isinstance(text, str) and len(text) <= 20 else None
    if match is None:
        raise InvalidRequest(f"cannot read size {str(text)[:40]!r}", hint=SIZE_HINT)
    unit = match["unit"]
    if unit.lower() not in UNITS:
        what = f"unit {unit!r} is not known" if unit else "has no unit"
        raise InvalidRequest(f"size {text!r} {what}", hint=SIZE_HINT)
    return check_size_gb(int(match["size"]))


def check_volume_name(name: str) -> str:
    """A volume name as the grammar allows it (the path of /v1/volumes/{name})."""
    if not isinstance(name, str) or not NAME.fullmatch(name):
        shown = name[:40] if isinstance(name, str) else type(name).__name__
        raise InvalidRequest(
            f"volume name {shown!r} is not allowed",
            hint="use letters, digits, '-' and '_', at most 63 characters, e.g. ckpts",
        )
    return name
