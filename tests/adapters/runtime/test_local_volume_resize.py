"""Growing a volume: the contract over LocalVolumes and FakeVolumes, and a real ext4 image grown
while mounted (online) and while not (offline), its data kept."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from lowcostgpu.adapters.fakes import FakeVolumes
from lowcostgpu.adapters.local import LocalVolumes
from lowcostgpu.adapters.local import volumes as local_volumes

TEST_GB = 20 * 2**20  # a "GB" of 20 MiB keeps the ext4 images tiny
# Growing a real image must be tried in CI (root, loop devices): skipped only outside CI.
needs_loop_mounts = pytest.mark.skipif(
    not local_volumes.loop_mounts_available() and not os.environ.get("CI"),
    reason="growing an image needs root and loop devices (never skipped when CI is set)",
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


def _capacity_bytes(path: str) -> int:
    found = os.statvfs(path)
    return found.f_blocks * found.f_frsize


def test_resize_grows_the_limit_is_idempotent_and_never_shrinks(
    volumes: LocalVolumes | FakeVolumes,
) -> None:
    volumes.ensure("acct-1", "ckpts", 1)
    volumes.resize("acct-1", "ckpts", 3)
    volumes.resize("acct-1", "ckpts", 3)  # carried out twice by the outbox: no change
    volumes.resize("acct-1", "ckpts", 2)  # smaller: the plane refuses it; here nothing happens
    assert volumes.ensure("acct-1", "ckpts", 1).size_gb == 3
    assert volumes.ensure("acct-2", "ckpts", 1).size_gb == 1  # another account's: untouched


def test_resizing_a_volume_not_made_yet_does_nothing(volumes: LocalVolumes | FakeVolumes) -> None:
    volumes.resize("acct-1", "later", 5)
    assert volumes.ensure("acct-1", "later", 2).size_gb == 2


@needs_loop_mounts
def test_a_mounted_image_grows_online_and_keeps_its_data(data_dir: Path) -> None:
    volumes = LocalVolumes(data_dir, bytes_per_gb=TEST_GB, enforce=True)
    mount = volumes.ensure("acct-1", "ckpts", 1)
    (Path(mount.path) / "ckpt").write_text("step 300")
    before = _capacity_bytes(mount.path)
    volumes.resize("acct-1", "ckpts", 3)
    after = _capacity_bytes(mount.path)
    assert after > 2.5 * before  # the file system itself grew, not only the recorded size
    assert (Path(mount.path) / "ckpt").read_text() == "step 300"
    # More than the old limit now fits.
    (Path(mount.path) / "big").write_bytes(b"\0" * int(1.5 * TEST_GB))


@needs_loop_mounts
def test_an_unmounted_image_grows_offline_and_mounts_at_the_new_size(data_dir: Path) -> None:
    volumes = LocalVolumes(data_dir, bytes_per_gb=TEST_GB, enforce=True)
    mount = volumes.ensure("acct-1", "v", 1)
    (Path(mount.path) / "ckpt").write_text("step 300")
    before = _capacity_bytes(mount.path)
    subprocess.run(["umount", mount.path], check=True)
    volumes.resize("acct-1", "v", 2)
    again = LocalVolumes(data_dir, bytes_per_gb=TEST_GB, enforce=True).ensure("acct-1", "v", 1)
    assert again.size_gb == 2
    assert _capacity_bytes(again.path) > 1.5 * before
    assert (Path(again.path) / "ckpt").read_text() == "step 300"


@needs_loop_mounts
def test_a_volume_a_workload_holds_grows_at_the_latest_when_the_next_run_starts(
    data_dir: Path,
) -> None:
    volumes = LocalVolumes(data_dir, bytes_per_gb=TEST_GB, enforce=True)
    mount = volumes.ensure("acct-1", "ckpts", 1)
    before = _capacity_bytes(mount.path)
    holder = subprocess.Popen(["sleep", "60"], cwd=mount.path)  # keeps the mount busy
    try:
        volumes.resize("acct-1", "ckpts", 3)  # online if the kernel lets us, else deferred
    finally:
        holder.kill()
        holder.wait()
    again = volumes.ensure("acct-1", "ckpts", 1)  # the next run's start
    assert again.size_gb == 3
    assert _capacity_bytes(again.path) > 2.5 * before
