"""Volumes: the contract over LocalVolumes and FakeVolumes; size limits and remounts locally."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import LocalHarness, wait_phase, workload_start
from lowcostgpu.adapters.fakes import FakeVolumes
from lowcostgpu.adapters.local import LocalVolumes
from lowcostgpu.adapters.local import volumes as local_volumes
from lowcostgpu.domain.errors import Conflict, InvalidRequest, NotFound

MB = 2**20
TEST_GB = 20 * MB  # a "GB" of 20 MiB keeps the ext4 images tiny

# The size-limit test must run in CI (root, loop devices): skipped only outside CI without them.
needs_loop_mounts = pytest.mark.skipif(
    not local_volumes.loop_mounts_available() and not os.environ.get("CI"),
    reason="size limits need root and loop devices (this test never skips when CI is set)",
)


def _unmount_under(root: Path) -> None:
    with open("/proc/mounts", encoding="utf-8") as f:
        mounts = [line.split()[1] for line in f]
    for mount_point in mounts:
        if mount_point.startswith(str(root)):
            subprocess.run(["umount", "-l", mount_point], check=False)


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "data"
    _unmount_under(tmp_path)


@pytest.fixture(params=["local", "fake"])
def volumes(request: pytest.FixtureRequest, data_dir: Path) -> LocalVolumes | FakeVolumes:
    if request.param == "fake":
        return FakeVolumes()
    return LocalVolumes(data_dir, bytes_per_gb=TEST_GB)


def test_a_volume_is_created_on_first_use_and_returned_after(
    volumes: LocalVolumes | FakeVolumes,
) -> None:
    first = volumes.ensure("acct-1", "ckpts", 1)
    assert (first.name, first.size_gb) == ("ckpts", 1)
    assert volumes.ensure("acct-1", "ckpts", 1) == first
    assert volumes.ensure("acct-1", "ckpts", 2) == first  # the existing one, as it is
    assert volumes.ensure("acct-2", "ckpts", 1).path != first.path
    assert volumes.usage_bytes("acct-1", "ckpts") < MB


def test_delete_removes_the_volume_and_is_idempotent(volumes: LocalVolumes | FakeVolumes) -> None:
    volumes.ensure("acct-1", "ckpts", 1)
    volumes.delete("acct-1", "ckpts")
    volumes.delete("acct-1", "ckpts")
    with pytest.raises(NotFound, match="ckpts"):
        volumes.usage_bytes("acct-1", "ckpts")


@pytest.mark.parametrize(
    ("name", "size_gb"),
    [("", 1), ("a/b", 1), ("..", 1), ("x" * 64, 1), ("with space", 1), ("dot.name", 1), ("ok", 0)],
)
def test_bad_names_and_sizes_are_refused_clearly(
    volumes: LocalVolumes | FakeVolumes, name: str, size_gb: int
) -> None:
    with pytest.raises(InvalidRequest, match="volume"):
        volumes.ensure("acct-1", name, size_gb)


def test_the_longest_allowed_name_is_accepted(volumes: LocalVolumes | FakeVolumes) -> None:
    assert volumes.ensure("acct-1", "A_b-9" + "x" * 58, 1).name == "A_b-9" + "x" * 58


def test_data_survives_a_new_volumes_object_and_usage_counts_it(data_dir: Path) -> None:
    mount = LocalVolumes(data_dir, bytes_per_gb=TEST_GB).ensure("acct-1", "ckpts", 1)
    (Path(mount.path) / "step-42.pt").write_bytes(b"\1" * 3 * MB)
    again = LocalVolumes(data_dir, bytes_per_gb=TEST_GB)
    assert again.ensure("acct-1", "ckpts", 1) == mount
    assert (Path(mount.path) / "step-42.pt").stat().st_size == 3 * MB
    assert 3 * MB <= again.usage_bytes("acct-1", "ckpts") < 4 * MB


WRITE_PAST_LIMIT = """
import errno, os
try:
    with open("big", "wb") as f:
        for _ in range(40):
            f.write(b"\\1" * 2**20)
            f.flush()
            os.fsync(f.fileno())
    print("wrote everything")
except OSError as exc:
    print("errno", errno.errorcode[exc.errno])
"""


@needs_loop_mounts
def test_a_write_past_the_size_limit_fails_in_the_workload(
    data_dir: Path, local: LocalHarness
) -> None:
    volumes = LocalVolumes(data_dir, bytes_per_gb=TEST_GB, enforce=True)
    mount = volumes.ensure("acct-1", "ckpts", 1)
    start = workload_start("a-1", (sys.executable, "-c", WRITE_PAST_LIMIT), volume=mount)
    local.runtime.start(start)
    assert wait_phase(local.runtime, "a-1", "exited").exit_code == 0
    assert "errno ENOSPC" in local.runtime.logs("a-1")
    assert volumes.usage_bytes("acct-1", "ckpts") <= TEST_GB


@needs_loop_mounts
def test_an_unmounted_volume_is_mounted_again_with_its_data(data_dir: Path) -> None:
    mount = LocalVolumes(data_dir, bytes_per_gb=TEST_GB, enforce=True).ensure("acct-1", "v", 1)
    (Path(mount.path) / "ckpt").write_text("step 4200")
    subprocess.run(["umount", mount.path], check=True)  # a reboot, as far as the volume knows
    assert not (Path(mount.path) / "ckpt").exists()
    LocalVolumes(data_dir, bytes_per_gb=TEST_GB, enforce=True).ensure("acct-1", "v", 1)
    assert (Path(mount.path) / "ckpt").read_text() == "step 4200"


@needs_loop_mounts
def test_a_volume_in_use_is_not_deleted(data_dir: Path, local: LocalHarness) -> None:
    volumes = LocalVolumes(data_dir, bytes_per_gb=TEST_GB, enforce=True)
    mount = volumes.ensure("acct-1", "ckpts", 1)
    local.start("a-1", volume=mount)
    local.wait_running("a-1")
    with pytest.raises(Conflict, match="stop the workloads"):
        volumes.delete("acct-1", "ckpts")
    local.runtime.kill("a-1")
    wait_phase(local.runtime, "a-1", "exited")
    volumes.delete("acct-1", "ckpts")
    assert not Path(mount.path).exists()


def test_without_loop_mounts_a_volume_is_a_plain_directory_and_says_so(
    data_dir: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(local_volumes, "_warned", False)
    with caplog.at_level(logging.WARNING):
        volumes = LocalVolumes(data_dir, bytes_per_gb=MB, enforce=False)
    assert "not enforced" in caplog.text
    mount = volumes.ensure("acct-1", "ckpts", 1)
    assert not os.path.ismount(mount.path)
    (Path(mount.path) / "big").write_bytes(b"\1" * 2 * MB)  # past 1 "GB" of 1 MiB: reported only
    assert volumes.usage_bytes("acct-1", "ckpts") >= 2 * MB
    volumes.delete("acct-1", "ckpts")
    assert not Path(mount.path).exists()


@pytest.mark.parametrize(("size_gb", "fits"), [(2, True), (3, False)])
def test_a_new_volume_must_fit_in_the_free_space_of_its_disk(
    data_dir: Path, size_gb: int, fits: bool
) -> None:
    data_dir.mkdir(parents=True)
    # A "GB" of a third of the free space (plus a byte): 2 of them fit, 3 never do, whatever
    # other processes write meanwhile (up to a third of the disk's free space).
    gb = shutil.disk_usage(data_dir).free // 3 + 1
    volumes = LocalVolumes(data_dir, bytes_per_gb=gb, enforce=False)
    if fits:
        volumes.check_fits("acct-1", "big", size_gb)
        return
    with pytest.raises(InvalidRequest, match=r"does not fit on this machine: at most 2 GB") as exc:
        volumes.check_fits("acct-1", "big", size_gb)
    assert exc.value.hint == "ask for at most 2 GB, e.g. big:2GB"


def test_an_existing_volume_fits_whatever_the_disk_has_left(data_dir: Path) -> None:
    volumes = LocalVolumes(data_dir, bytes_per_gb=MB, enforce=False)
    volumes.ensure("acct-1", "kept", 5)
    huge = LocalVolumes(data_dir, bytes_per_gb=2**50, enforce=False)  # now nothing new fits
    huge.check_fits("acct-1", "kept", 5)
    with pytest.raises(InvalidRequest, match="at most 0 GB"):
        huge.check_fits("acct-1", "new", 1)


@needs_loop_mounts
def test_an_image_the_file_system_cannot_hold_is_a_clear_error_not_an_oserror(
    data_dir: Path,
) -> None:
    volumes = LocalVolumes(data_dir, bytes_per_gb=2**40, enforce=True)  # 1 "GB" = 1 TiB
    with pytest.raises(InvalidRequest, match="volume big of 100 GB cannot be made here"):
        volumes.ensure("acct-1", "big", 100)  # 100 TiB: over ext4's 16 TiB file limit
    assert not list((data_dir / "volumes" / ".store" / "acct-1").iterdir())  # nothing half-made
