"""Loading the catalog and the fleet from real files, and what an operator sees when that fails."""

from __future__ import annotations

import os
from decimal import Decimal
from pathlib import Path

import pytest

from lowcostgpu.adapters.files import load_catalog, load_fleet, read_config_text
from lowcostgpu.domain.capacity import PoolKey
from lowcostgpu.domain.errors import ConfigError
from lowcostgpu.domain.fleet import gpus_per_pool


def test_no_path_means_the_shipped_catalog() -> None:
    catalog = load_catalog()
    assert catalog.gpu("rtx-5090").interruptible_per_gpu_hour.amount == Decimal("0.2405")
    assert len(catalog.gpu_types) == 6


def test_no_path_means_the_shipped_demo_fleet() -> None:
    hosts = load_fleet(None, load_catalog())
    assert gpus_per_pool(hosts)[PoolKey("eu-west", "a100-sxm4")] == 8
    assert len(hosts) == 4


def test_operator_files_are_read_from_their_paths(tmp_path: Path) -> None:
    catalog_path = tmp_path / "catalog.toml"
    catalog_path.write_text(
        '[storage]\nper_gb_month = "0.05"\n[gpu.b200]\non_demand_per_gpu_hour = "3.00"\n',
        encoding="utf-8",
    )
    fleet_path = tmp_path / "fleet.toml"
    fleet_path.write_text(
        '[[region]]\nname = "lab"\n[[region.hosts]]\nname = "n"\ngpu_type = "b200"\n'
        "gpus = 8\ncount = 2\n",
        encoding="utf-8",
    )
    catalog = load_catalog(catalog_path)
    assert catalog.gpu("b200").interruptible_per_gpu_hour.amount == Decimal("1.50")
    assert [h.id for h in load_fleet(fleet_path, catalog)] == ["n-0", "n-1"]


def test_a_parse_error_names_the_operator_path_and_line(tmp_path: Path) -> None:
    fleet_path = tmp_path / "fleet.toml"
    fleet_path.write_text(
        '[[region]]\nname = "lab"\n[[region.hosts]]\nname = "n"\ngpu_type = "b200"\ngpus = 8\n',
        encoding="utf-8",
    )
    with pytest.raises(ConfigError) as info:
        load_fleet(fleet_path, load_catalog())
    assert str(info.value).startswith(f"{fleet_path}, line 5: host 'n' in region 'lab'")
    assert "unknown GPU type 'b200'" in str(info.value)


def test_a_missing_file_says_which_and_how_to_fall_back(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_fleet(tmp_path / "nope.toml", load_catalog())
    text = str(info.value)
    assert f"fleet file {tmp_path / 'nope.toml'} does not exist" in text
    assert "leave out --fleet" in text
    assert info.value.details == {"source": str(tmp_path / "nope.toml")}


def test_a_directory_is_not_a_catalog(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"is a directory, not a file.*--catalog"):
        load_catalog(tmp_path)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_an_unreadable_file_says_permission_denied(tmp_path: Path) -> None:
    path = tmp_path / "catalog.toml"
    path.write_text("x = 1\n", encoding="utf-8")
    path.chmod(0)
    try:
        with pytest.raises(ConfigError, match=r"permission denied.*chmod a\+r"):
            load_catalog(path)
    finally:
        path.chmod(0o600)


def test_a_file_that_is_not_utf8_is_refused_clearly(tmp_path: Path) -> None:
    path = tmp_path / "fleet.toml"
    path.write_bytes(b'[[region]]\nname = "caf\xe9"\n')
    with pytest.raises(ConfigError, match="not UTF-8 text"):
        load_fleet(path, load_catalog())


def test_other_os_errors_become_config_errors(tmp_path: Path) -> None:
    looped = tmp_path / "loop.toml"
    looped.symlink_to(looped)  # reading it fails with ELOOP, neither missing nor a directory
    with pytest.raises(ConfigError, match="cannot be read"):
        read_config_text(looped, what="catalog", option="--catalog")
