"""The fleet file: which hosts exist, in which region, with which GPU type and how many GPUs.

The same file drives the local runtime (one real process group per workload on this machine) and
the simulator, so an operator describes a fleet once. It is TOML:

    # One [[region]] table per region; its hosts follow as [[region.hosts]] tables.
    [[region]]
    name = "eu-west"

      [[region.hosts]]
      name = "gpu-a"          # the host id; unique across the whole fleet
      gpu_type = "a100-sxm4"  # a GPU type of the catalog
      gpus = 8                # GPUs on this host, indexed 0..gpus-1

      [[region.hosts]]
      name = "gpu-b"
      gpu_type = "rtx-4090"
      gpus = 4
      count = 3               # optional: 3 identical hosts gpu-b-0, gpu-b-1, gpu-b-2

A pool is (region, GPU type); every host belongs to exactly one. Unknown keys are refused rather
than ignored, because a misspelt `gpu = 8` silently ignored would give a fleet the operator did
not mean. This module only parses text (reading the file is `lowcostgpu.adapters.files`); every
error names the source and, where it can be found, the line of the offending entry. tomllib
reports lines only for syntax errors, so the line of a semantic error is found by pairing the
n-th `[[region.hosts]]` header of the text with the n-th host entry.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from lowcostgpu.domain.capacity import Host, PoolKey
from lowcostgpu.domain.catalog import Catalog
from lowcostgpu.domain.errors import ConfigError

REGION_NAME: Final = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
HOST_NAME: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
MAX_GPUS_PER_HOST: Final = 1024
MAX_HOST_COUNT: Final = 100_000
HOST_KEYS: Final = ("name", "gpu_type", "gpus", "count")
REGION_KEYS: Final = ("name", "hosts")

_REGION_HEADER = re.compile(r"^\s*\[\[\s*region\s*\]\]")
_HOSTS_HEADER = re.compile(r"^\s*\[\[\s*region\s*\.\s*hosts\s*\]\]")
_ANY_HEADER = re.compile(r"^\s*\[")
_TOML_LINE = re.compile(r"line (\d+)")
_EXAMPLE = '[[region]] name = "eu-west", then [[region.hosts]] name, gpu_type, gpus'


class _Lines:
    """Finds the line (1-based) of the n-th region or host entry, and of a key inside it."""

    def __init__(self, text: str, region_count: int, host_count: int) -> None:
        self._lines = text.splitlines()
        numbered = list(enumerate(self._lines, start=1))
        regions = [n for n, line in numbered if _REGION_HEADER.match(line)]
        hosts = [n for n, line in numbered if _HOSTS_HEADER.match(line)]
        self._headers = [n for n, line in numbered if _ANY_HEADER.match(line)]
        # Inline tables (hosts = [{...}]) have no headers: then fall back to searching by name.
        self._regions = regions if len(regions) == region_count else []
        self._hosts = hosts if len(hosts) == host_count else []

    def region(self, index: int, name: Any) -> int | None:
        return self._regions[index] if self._regions else self._find_name(name)

    def host(self, index: int, name: Any) -> int | None:
        return self._hosts[index] if self._hosts else self._find_name(name)

    def key(self, start: int | None, key: str) -> int | None:
        """The line of `key = …` in the entry whose header is on line `start`, else `start`."""
        if start is None:
            return None
        end = next((n for n in self._headers if n > start), len(self._lines) + 1)
        pattern = re.compile(rf"^\s*{re.escape(key)}\s*=")
        for number in range(start + 1, end):
            if pattern.match(self._lines[number - 1]):
                return number
        return start

    def _find_name(self, name: Any) -> int | None:
        if not isinstance(name, str):
            return None
        pattern = re.compile(rf"\bname\s*=\s*[\"']{re.escape(name)}[\"']")
        for number, line in enumerate(self._lines, start=1):
            if pattern.search(line):
                return number
        return None


@dataclass(frozen=True, slots=True)
class _Where:
    """Where an entry is, for error messages."""

    source: str
    line: int | None
    what: str

    def error(
        self, problem: str, *, hint: str | None = None, line: int | None = None
    ) -> ConfigError:
        at = line if line is not None else self.line
        place = f"{self.source}, line {at}" if at is not None else self.source
        return ConfigError(
            f"{place}: {self.what}: {problem}", hint=hint, source=self.source, line=at
        )


def parse_fleet(text: str, catalog: Catalog, *, source: str = "fleet") -> list[Host]:
    """Parse a fleet file into hosts, in file order; refuse anything ambiguous or unknown."""
    data = _load(text, source)
    file = _Where(source, None, "fleet")
    _refuse_unknown_keys(data, ("region",), file)
    regions = data.get("region")
    if not isinstance(regions, list) or not regions:
        raise file.error("no [[region]] tables", hint=f"declare at least one: {_EXAMPLE}")
    if not all(isinstance(r, dict) for r in regions):
        raise file.error("`region` must be a list of [[region]] tables", hint=_EXAMPLE)
    host_count = sum(len(r["hosts"]) for r in regions if isinstance(r.get("hosts"), list))
    lines = _Lines(text, len(regions), host_count)
    hosts: list[Host] = []
    seen_regions: dict[str, int | None] = {}
    seen_hosts: dict[str, int | None] = {}
    host_index = 0
    for region_index, region in enumerate(regions):
        where = _Where(source, lines.region(region_index, region.get("name")), "[[region]]")
        name = _region_name(region, where, lines, seen_regions)
        for entry in _host_entries(region, name, where):
            line = lines.host(host_index, entry.get("name") if isinstance(entry, dict) else None)
            host_index += 1
            for host in _parse_host(entry, name, catalog, _Where(source, line, "host"), lines):
                _refuse_duplicate(host.id, lines.key(line, "name"), seen_hosts, source)
                hosts.append(host)
    return hosts


def gpus_per_pool(hosts: Iterable[Host]) -> dict[PoolKey, int]:
    """Total GPUs of each pool, sorted by pool: what `lowcostgpu fleet` and the simulator show."""
    totals: dict[PoolKey, int] = {}
    for host in hosts:
        totals[host.pool] = totals.get(host.pool, 0) + host.gpu_count
    return dict(sorted(totals.items()))


def _load(text: str, source: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        match = _TOML_LINE.search(str(exc))
        line = int(match.group(1)) if match else None
        place = f"{source}, line {line}" if line is not None else source
        raise ConfigError(
            f"{place}: not valid TOML: {exc}",
            hint="fix the syntax at that line (strings in double quotes, tables in [[...]])",
            source=source,
            line=line,
        ) from None


def _refuse_unknown_keys(entry: Mapping[str, Any], known: tuple[str, ...], where: _Where) -> None:
    unknown = sorted(set(entry) - set(known))
    if unknown:
        raise where.error(
            f"unknown key {unknown[0]!r}", hint=f"the keys allowed here are: {', '.join(known)}"
        )


def _region_name(
    region: Mapping[str, Any], where: _Where, lines: _Lines, seen: dict[str, int | None]
) -> str:
    _refuse_unknown_keys(region, REGION_KEYS, where)
    name = region.get("name")
    if name is None:
        raise where.error("`name` is missing", hint='give the region a name, e.g. name = "eu-west"')
    if not isinstance(name, str) or not REGION_NAME.match(name):
        raise where.error(
            f"region name {name!r} is not valid",
            hint="use lower-case letters, digits and dashes, e.g. eu-west",
            line=lines.key(where.line, "name"),
        )
    if name in seen:
        earlier = f" (first declared on line {seen[name]})" if seen[name] else ""
        raise where.error(
            f"region {name!r} is declared twice{earlier}",
            hint="declare each region once and list all its hosts under it",
        )
    seen[name] = where.line
    return name


def _host_entries(region: Mapping[str, Any], name: str, where: _Where) -> list[Any]:
    entries = region.get("hosts")
    if not isinstance(entries, list) or not entries:
        raise where.error(
            f"region {name!r} has no hosts",
            hint="add [[region.hosts]] tables with name, gpu_type and gpus under it",
        )
    return entries


def _parse_host(
    entry: Any, region: str, catalog: Catalog, where: _Where, lines: _Lines
) -> list[Host]:
    if not isinstance(entry, dict):
        raise where.error("each host must be a [[region.hosts]] table", hint=_EXAMPLE)
    _refuse_unknown_keys(entry, HOST_KEYS, where)
    for key in ("name", "gpu_type", "gpus"):
        if key not in entry:
            raise where.error(
                f"`{key}` is missing", hint="every host needs name, gpu_type and gpus"
            )
    name = entry["name"]
    if not isinstance(name, str) or not HOST_NAME.match(name):
        raise where.error(
            f"host name {name!r} is not valid",
            hint="use letters, digits, dots, dashes and underscores, e.g. gpu-a",
            line=lines.key(where.line, "name"),
        )
    where = _Where(where.source, where.line, f"host {name!r} in region {region!r}")
    gpu_type = _gpu_type(entry["gpu_type"], catalog, where, lines)
    gpus = _whole(entry["gpus"], "gpus", MAX_GPUS_PER_HOST, where, lines)
    pool = PoolKey(region, gpu_type)
    if "count" not in entry:
        return [Host(id=name, pool=pool, gpu_count=gpus)]
    count = _whole(entry["count"], "count", MAX_HOST_COUNT, where, lines)
    return [Host(id=f"{name}-{i}", pool=pool, gpu_count=gpus) for i in range(count)]


def _gpu_type(raw: Any, catalog: Catalog, where: _Where, lines: _Lines) -> str:
    if isinstance(raw, str) and raw in catalog.gpu_types:
        return raw
    known = ", ".join(sorted(catalog.gpu_types))
    raise where.error(
        f"unknown GPU type {raw!r}",
        hint=f"use one of the catalog's GPU types: {known}",
        line=lines.key(where.line, "gpu_type"),
    )


def _whole(raw: Any, key: str, maximum: int, where: _Where, lines: _Lines) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int) or not 1 <= raw <= maximum:
        raise where.error(
            f"{key} must be a whole number from 1 to {maximum}, got {raw!r}",
            hint=f"write e.g. {key} = 8 (no quotes)",
            line=lines.key(where.line, key),
        )
    return raw


def _refuse_duplicate(
    host_id: str, line: int | None, seen: dict[str, int | None], source: str
) -> None:
    if host_id in seen:
        earlier = f" (first declared on line {seen[host_id]})" if seen[host_id] else ""
        raise _Where(source, line, f"host {host_id!r}").error(
            f"duplicate host id{earlier}",
            hint="host ids are unique across the whole fleet; rename one (count = N adds -0..-N-1)",
        )
    seen[host_id] = line


MAX_LISTED: Final = 8  # disagreements of a fleet with its cluster named in one error


def listed(items: Sequence[str]) -> str:
    """Items for an error about a fleet and its cluster (Slurm's, Kubernetes'): the first
    `MAX_LISTED`, the rest counted; `; ` between items that have spaces themselves."""
    sep = "; " if any(" " in i for i in items) else ", "
    shown = sep.join(items[:MAX_LISTED])
    more = len(items) - MAX_LISTED
    return f"{shown} and {more} more" if more > 0 else shown
