"""The catalog file: the shipped prices, and errors naming the wrong entry and the fix."""

from __future__ import annotations

from decimal import Decimal
from importlib.resources import files

import pytest

from lowcostgpu.domain.catalog import parse_catalog
from lowcostgpu.domain.errors import ConfigError, NotFound

SHIPPED = files("lowcostgpu.domain").joinpath("catalog.toml").read_text(encoding="utf-8")

DESIGN_PRICES = {
    "h100-sxm": "1.680",
    "a100-sxm4": "0.468",
    "l40s": "0.448",
    "rtx-5090": "0.481",
    "rtx-4090": "0.354",
    "rtx-3090": "0.148",
}


def test_the_shipped_catalog_has_the_six_seed_gpu_types() -> None:
    catalog = parse_catalog(SHIPPED, source="catalog.toml")
    assert set(catalog.gpu_types) == set(DESIGN_PRICES)


@pytest.mark.parametrize(("name", "price"), sorted(DESIGN_PRICES.items()))
def test_shipped_prices_match_the_design_and_interruptible_is_half(name: str, price: str) -> None:
    gpu = parse_catalog(SHIPPED).gpu(name)
    assert gpu.on_demand_per_gpu_hour.amount == Decimal(price)
    assert gpu.interruptible_per_gpu_hour.amount == Decimal(price) * Decimal("0.50")
    assert gpu.memory_gb > 0


def test_rtx_5090_interruptible_is_0_2405_exactly() -> None:
    gpu = parse_catalog(SHIPPED).gpu("rtx-5090")
    assert gpu.interruptible_per_gpu_hour.amount == Decimal("0.2405")
    assert gpu.display_name == "RTX 5090"


def test_storage_price_is_read() -> None:
    assert parse_catalog(SHIPPED).storage_per_gb_month.amount == Decimal("0.10")


def test_unknown_gpu_lookup_lists_the_known_types_and_the_command_to_see_them() -> None:
    with pytest.raises(NotFound) as info:
        parse_catalog(SHIPPED).gpu("a100")
    text = str(info.value)
    assert "'a100'" in text
    for name in DESIGN_PRICES:
        assert name in text
    assert "lowcostgpu prices" in text


GOOD_STORAGE = '[storage]\nper_gb_month = "0.10"\n'


@pytest.mark.parametrize(
    ("text", "fragments"),
    [
        (
            GOOD_STORAGE + "[gpu.x1]\non_demand_per_gpu_hour = 0.468\n",
            ["[gpu.x1]", "float", '"0.468"'],
        ),
        (GOOD_STORAGE + "[gpu.x1]\nmemory_gb = 8\n", ["[gpu.x1]", "missing", "string"]),
        (
            GOOD_STORAGE + '[gpu.x1]\non_demand_per_gpu_hour = "-0.1"\n',
            ["[gpu.x1]", "negative", "-0.1"],
        ),
        (
            GOOD_STORAGE + '[gpu.x1]\non_demand_per_gpu_hour = "cheap"\n',
            ["[gpu.x1]", "not a number"],
        ),
        (GOOD_STORAGE + "[gpu.x1\n", ["not valid TOML", "line 3"]),
        (GOOD_STORAGE, ["no [gpu.NAME] tables", "a100-sxm4"]),
        ('[gpu.x1]\non_demand_per_gpu_hour = "1"\n', ["[storage] per_gb_month", "missing"]),
        ('storage = 5\n[gpu.x1]\non_demand_per_gpu_hour = "1"\n', ["[storage]", "table"]),
        (GOOD_STORAGE + '[gpu.X_1]\non_demand_per_gpu_hour = "1"\n', ["[gpu.X_1]", "lower-case"]),
        (GOOD_STORAGE + "[gpu]\nx1 = 3\n", ["[gpu.x1]", "table"]),
        (
            GOOD_STORAGE + '[gpu.x1]\non_demand_per_gpu_hour = "1"\nmemory_gb = -2\n',
            ["[gpu.x1]", "memory_gb"],
        ),
    ],
    ids=[
        "float-price",
        "missing-price",
        "negative-price",
        "word-price",
        "bad-toml",
        "no-gpus",
        "no-storage",
        "storage-not-a-table",
        "bad-name",
        "gpu-not-a-table",
        "negative-memory",
    ],
)
def test_bad_catalogs_name_the_source_and_the_entry(text: str, fragments: list[str]) -> None:
    with pytest.raises(ConfigError) as info:
        parse_catalog(text, source="ops/catalog.toml")
    message = str(info.value)
    assert message.startswith("ops/catalog.toml")
    for fragment in fragments:
        assert fragment in message
    assert info.value.details.get("source") == "ops/catalog.toml"


def test_an_operator_catalog_with_integer_prices_is_exact() -> None:
    catalog = parse_catalog("[storage]\nper_gb_month = 0\n[gpu.x1]\non_demand_per_gpu_hour = 3\n")
    assert catalog.gpu("x1").interruptible_per_gpu_hour.amount == Decimal("1.50")
    assert catalog.gpu("x1").display_name == "x1"
