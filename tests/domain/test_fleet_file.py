"""The fleet file: hosts per region and pool, and errors that point at the offending line."""

from __future__ import annotations

from importlib.resources import files

import pytest

from lowcostgpu.domain.capacity import Host, PoolKey
from lowcostgpu.domain.catalog import Catalog, parse_catalog
from lowcostgpu.domain.errors import ConfigError
from lowcostgpu.domain.fleet import gpus_per_pool, parse_fleet

CATALOG: Catalog = parse_catalog(
    files("lowcostgpu.domain").joinpath("catalog.toml").read_text(encoding="utf-8")
)
DEMO = files("lowcostgpu.domain").joinpath("fleets", "demo.toml").read_text(encoding="utf-8")

GOOD = """\
[[region]]
name = "eu-west"

  [[region.hosts]]
  name = "gpu-a"
  gpu_type = "a100-sxm4"
  gpus = 8

  [[region.hosts]]
  name = "gpu-b"
  gpu_type = "rtx-4090"
  gpus = 4
  count = 3

[[region]]
name = "us-east"

  [[region.hosts]]
  name = "gpu-c"
  gpu_type = "a100-sxm4"
  gpus = 2
"""


def test_hosts_come_out_in_file_order_with_their_pools() -> None:
    hosts = parse_fleet(GOOD, CATALOG, source="fleet.toml")
    assert hosts == [
        Host("gpu-a", PoolKey("eu-west", "a100-sxm4"), 8),
        Host("gpu-b-0", PoolKey("eu-west", "rtx-4090"), 4),
        Host("gpu-b-1", PoolKey("eu-west", "rtx-4090"), 4),
        Host("gpu-b-2", PoolKey("eu-west", "rtx-4090"), 4),
        Host("gpu-c", PoolKey("us-east", "a100-sxm4"), 2),
    ]


def test_gpus_per_pool_sums_hosts() -> None:
    assert gpus_per_pool(parse_fleet(GOOD, CATALOG)) == {
        PoolKey("eu-west", "a100-sxm4"): 8,
        PoolKey("eu-west", "rtx-4090"): 12,
        PoolKey("us-east", "a100-sxm4"): 2,
    }


def test_the_shipped_demo_fleet_is_small_two_regions_two_gpu_types() -> None:
    hosts = parse_fleet(DEMO, CATALOG, source="demo.toml")
    pools = gpus_per_pool(hosts)
    assert {p.region for p in pools} == {"eu-west", "us-east"}
    assert {p.gpu_type for p in pools} == {"a100-sxm4", "rtx-4090"}
    assert {h.gpu_count for h in hosts} == {8, 4}
    assert sum(pools.values()) <= 32, "the local runtime starts real processes for all of it"
    assert len({h.id for h in hosts}) == len(hosts)


def test_inline_host_tables_parse_too() -> None:
    text = '[[region]]\nname = "r1"\nhosts = [{name = "h1", gpu_type = "l40s", gpus = 4}]\n'
    assert parse_fleet(text, CATALOG) == [Host("h1", PoolKey("r1", "l40s"), 4)]


def _lines_of(text: str, needle: str, occurrence: int = 1) -> int:
    found = [n for n, line in enumerate(text.splitlines(), 1) if needle in line]
    return found[occurrence - 1]


def _replace(old: str, new: str, count: int = 1) -> str:
    assert old in GOOD
    return GOOD.replace(old, new, count)


BAD_CASES = [
    # (id, text, the line the error must name (a needle found on it), fragments of the message)
    (
        "unknown-gpu-type",
        _replace('gpu_type = "rtx-4090"', 'gpu_type = "rtx-4080"'),
        ('gpu_type = "rtx-4080"', 1),
        ["'rtx-4080'", "gpu-b", "a100-sxm4, h100-sxm, l40s", "rtx-5090"],
    ),
    ("zero-gpus", _replace("gpus = 4", "gpus = 0"), ("gpus = 0", 1), ["gpus", "from 1", "0"]),
    ("negative-gpus", _replace("gpus = 2", "gpus = -2"), ("gpus = -2", 1), ["gpu-c", "-2"]),
    ("quoted-gpus", _replace("gpus = 2", 'gpus = "2"'), ('gpus = "2"', 1), ["no quotes"]),
    ("float-gpus", _replace("gpus = 2", "gpus = 2.0"), ("gpus = 2.0", 1), ["whole number"]),
    ("bool-gpus", _replace("gpus = 2", "gpus = true"), ("gpus = true", 1), ["True"]),
    ("zero-count", _replace("count = 3", "count = 0"), ("count = 0", 1), ["count"]),
    (
        "duplicate-host",
        _replace('name = "gpu-c"', 'name = "gpu-a"'),
        ('name = "gpu-a"', 2),
        ["'gpu-a'", "duplicate", "line 5"],
    ),
    (
        "duplicate-with-count",
        _replace('name = "gpu-c"', 'name = "gpu-b-1"'),
        ('name = "gpu-b-1"', 1),
        ["'gpu-b-1'", "duplicate", "count"],
    ),
    (
        "missing-gpu-type",
        _replace('  gpu_type = "a100-sxm4"\n  gpus = 2', "  gpus = 2"),
        ("[[region.hosts]]", 3),
        ["`gpu_type` is missing"],
    ),
    (
        "missing-name",
        _replace('  name = "gpu-b"\n', ""),
        ("[[region.hosts]]", 2),
        ["`name` is missing"],
    ),
    (
        "typo-key",
        _replace("gpus = 8", "gpu = 8"),
        ("[[region.hosts]]", 1),
        ["unknown key 'gpu'", "name, gpu_type, gpus, count"],
    ),
    (
        "bad-host-name",
        _replace('name = "gpu-a"', 'name = "gpu a"'),
        ('name = "gpu a"', 1),
        ["'gpu a'", "not valid"],
    ),
    (
        "duplicate-region",
        _replace('name = "us-east"', 'name = "eu-west"'),
        ("[[region]]", 2),
        ["'eu-west'", "twice", "line 1"],
    ),
    (
        "region-without-hosts",
        '[[region]]\nname = "r1"\n\n[[region]]\nname = "r2"\n',
        ("[[region]]", 1),
        ["'r1'", "no hosts"],
    ),
    (
        "region-without-name",
        _replace('name = "us-east"\n', ""),
        ("[[region]]", 2),
        ["`name` is missing"],
    ),
    ("bad-region-name", _replace('"us-east"', '"US East"'), ('"US East"', 1), ["not valid"]),
    ("bad-toml", _replace("gpus = 8", "gpus = 8 8"), ("gpus = 8 8", 1), ["not valid TOML"]),
]


@pytest.mark.parametrize(
    ("text", "line_of", "fragments"),
    [pytest.param(text, line, frags, id=name) for name, text, line, frags in BAD_CASES],
)
def test_bad_fleets_name_source_and_line(
    text: str, line_of: tuple[str, int], fragments: list[str]
) -> None:
    with pytest.raises(ConfigError) as info:
        parse_fleet(text, CATALOG, source="ops/fleet.toml")
    expected_line = _lines_of(text, *line_of)
    message = str(info.value)
    assert message.startswith(f"ops/fleet.toml, line {expected_line}: "), message
    assert info.value.details == {"source": "ops/fleet.toml", "line": expected_line}
    for fragment in fragments:
        assert fragment in message, message


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "no [[region]] tables"),
        ('title = "x"\n', "unknown key 'title'"),
        ('region = "eu"\n', "[[region]]"),
        ("region = [1, 2]\n", "list of [[region]] tables"),
    ],
)
def test_fleets_without_regions_are_refused_with_an_example(text: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_fleet(text, CATALOG, source="f.toml")
    assert str(info.value).startswith("f.toml: ")
    assert fragment in str(info.value)


def test_inline_entries_find_their_line_by_name() -> None:
    text = (
        '[[region]]\nname = "r1"\nhosts = [\n'
        '  {name = "h1", gpu_type = "l40s", gpus = 4},\n'
        '  {name = "h2", gpu_type = "nope", gpus = 4},\n]\n'
    )
    with pytest.raises(ConfigError, match=r"^f, line 5: host 'h2'"):
        parse_fleet(text, CATALOG, source="f")


def test_a_huge_count_is_refused_before_anything_is_built() -> None:
    with pytest.raises(ConfigError, match="count must be a whole number from 1 to 100000"):
        parse_fleet(_replace("count = 3", "count = 1000000000"), CATALOG)
