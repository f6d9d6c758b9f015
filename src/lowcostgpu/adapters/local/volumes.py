"""Local volumes: directories under `<data_dir>/volumes/<account>/<name>` with a size limit.

When this process is root and loop devices work (checked once), each volume is a sparse ext4
image (`<data_dir>/volumes/.store/<account>/<name>.img`, `mkfs.ext4 -m 0`: no reserved blocks, so
the limit is the size; an empty 50 GB volume takes about 5 MB of real disk) loop-mounted on its
directory: a write past the limit fails in the workload with ENOSPC. A volume found unmounted
(after a reboot, say) is mounted again by `ensure`. Otherwise a volume is a plain directory and
the limit is only reported (a warning says so once).

Sizes are in GB of `bytes_per_gb` bytes (10**9); tests pass a small `bytes_per_gb` to keep images
tiny. Usage is what the volume's files take on disk (`du`), the same in both modes.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import shutil
import subprocess
import threading
from pathlib import Path
from typing import Any

from lowcostgpu.adapters.local.shim import read_json, write_json_atomic
from lowcostgpu.domain.errors import Conflict, InvalidRequest, NotFound
from lowcostgpu.ports.runtime import VolumeMount

log = logging.getLogger(__name__)

_NAME = re.compile(r"[A-Za-z0-9_-]{1,63}")
_ACCOUNT = re.compile(r"[A-Za-z0-9_-]{1,128}")
_warned = False  # the "limits are not enforced" warning is logged once per process


def check_volume_name(name: str) -> None:
    if not _NAME.fullmatch(name):
        raise InvalidRequest(
            f"volume name {name!r} is not valid",
            hint="use 1 to 63 letters, digits, '-' or '_' (for example 'ckpts')",
        )


def check_volume_request(account_id: str, name: str, size_gb: int | None = None) -> None:
    """The checks every `Volumes` implementation makes, with the same messages."""
    if not _ACCOUNT.fullmatch(account_id):
        raise InvalidRequest(f"account id {account_id!r} is not valid for a volume")
    check_volume_name(name)
    if size_gb is not None and (isinstance(size_gb, bool) or size_gb < 1):
        raise InvalidRequest(
            f"volume {name} size {size_gb} GB is not valid", hint="give a whole number of GB >= 1"
        )


def loop_mounts_available() -> bool:
    """Root, a loop-control device and mkfs.ext4: what an enforced size limit needs."""
    return (
        os.geteuid() == 0
        and os.path.exists("/dev/loop-control")
        and shutil.which("mkfs.ext4") is not None
        and shutil.which("mount") is not None
    )


class LocalVolumes:
    """`Volumes` on this machine. `enforce`: None = when possible, True = required, False = no."""

    def __init__(
        self, data_dir: Path | str, *, bytes_per_gb: int = 10**9, enforce: bool | None = None
    ) -> None:
        self._root = Path(data_dir).resolve() / "volumes"
        self._store = self._root / ".store"
        self._store.mkdir(parents=True, exist_ok=True)
        self._bytes_per_gb = bytes_per_gb
        possible = loop_mounts_available()
        if enforce and not possible:
            raise Conflict(
                "volume size limits need loop-mounted images, which this process cannot make",
                hint="run as root on a machine with loop devices and mkfs.ext4, or allow "
                "unenforced limits",
            )
        self.enforced = possible if enforce is None else enforce
        global _warned
        if not self.enforced and not _warned:
            _warned = True
            log.warning(
                "volumes under %s are plain directories: their size limit is reported, "
                "not enforced (enforcing needs root, loop devices and mkfs.ext4)",
                self._root,
            )

    def check_fits(
        self, account_id: str, name: str, size_gb: int | None, *, region: str | None = None
    ) -> None:
        """A new volume must fit in the disk's free space and, as an image, under the file
        system's largest file (ext4: 16 TiB; `big:100000GB` used to fail later, in the outbox).
        One machine is one region: `region` is ignored."""
        check_volume_request(account_id, name, size_gb)
        if size_gb is None:
            return  # an existing volume is attached (the plane refuses one that is not there)
        if read_json(self._meta(account_id, name)) is not None:
            return  # it exists: its size was checked when it was made
        free_gb = shutil.disk_usage(self._store).free // self._bytes_per_gb
        largest_gb = self._largest_image_gb(size_gb) if self.enforced else size_gb
        fits_gb = min(free_gb, largest_gb)
        if size_gb > fits_gb:
            why = "the free space of its disk" if free_gb <= largest_gb else "the largest file"
            raise InvalidRequest(
                f"volume {name} of {size_gb} GB does not fit on this machine: at most "
                f"{fits_gb} GB fits ({why})",
                hint=f"ask for at most {fits_gb} GB, e.g. {name}:{max(1, fits_gb)}GB",
            )

    def _largest_image_gb(self, size_gb: int) -> int:
        """`size_gb` if an image of that size can be made here, else the largest that can."""
        if self._image_fits(size_gb):
            return size_gb
        low, high = 0, size_gb  # low fits (0 trivially), high does not
        while high - low > 1:
            mid = (low + high) // 2
            low, high = (mid, high) if self._image_fits(mid) else (low, mid)
        return low

    def _image_fits(self, size_gb: int) -> bool:
        probe = self._store / f".fits-{os.getpid()}-{threading.get_ident()}"
        try:
            with open(probe, "wb") as f:
                f.truncate(size_gb * self._bytes_per_gb)  # sparse: asks the file system only
            return True
        except OSError:
            return False
        finally:
            probe.unlink(missing_ok=True)

    def ensure(
        self, account_id: str, name: str, size_gb: int, *, region: str | None = None
    ) -> VolumeMount:
        check_volume_request(account_id, name, size_gb)
        try:
            return self._ensure(account_id, name, size_gb)
        except OSError as exc:
            reason = exc.strerror or type(exc).__name__
            if exc.errno in (errno.EFBIG, errno.EINVAL):  # can never succeed: fail its instance
                raise InvalidRequest(
                    f"volume {name} of {size_gb} GB cannot be made here: {reason}",
                    hint="launch with a smaller volume",
                ) from None
            raise Conflict(
                f"volume {name} cannot be made or mounted: {reason}",
                hint="check the disk of the data directory (free space, permissions)",
            ) from None

    def _ensure(self, account_id: str, name: str, size_gb: int) -> VolumeMount:
        path, meta_path = self._path(account_id, name), self._meta(account_id, name)
        meta = read_json(meta_path)
        if meta is None:
            meta = {"size_gb": size_gb, "enforced": self.enforced}
            meta_path.parent.mkdir(parents=True, exist_ok=True)
            if self.enforced:
                self._make_image(self._image(account_id, name), size_gb)
            write_json_atomic(meta_path, meta)  # last: a half-made volume is made again
        path.mkdir(parents=True, exist_ok=True)
        if meta.get("enforced"):
            self._grow(account_id, name, meta)  # a grow that waited for its workload to end
        if meta.get("enforced") and not _is_mounted(path):
            image = str(self._image(account_id, name))
            _run(["mount", "-o", "loop,noinit_itable", image, str(path)])
        return VolumeMount(name=name, size_gb=int(meta["size_gb"]), path=str(path))

    def usage_bytes(self, account_id: str, name: str) -> int:
        check_volume_request(account_id, name)
        path = self._path(account_id, name)
        if read_json(self._meta(account_id, name)) is None or not path.is_dir():
            raise NotFound(f"volume {name} of account {account_id} does not exist")
        return _disk_usage_bytes(path)

    def delete(self, account_id: str, name: str) -> None:
        """Unmount and remove the volume and its data; nothing happens if it does not exist."""
        check_volume_request(account_id, name)
        path = self._path(account_id, name)
        if _is_mounted(path):
            result = subprocess.run(["umount", str(path)], capture_output=True, text=True)
            if result.returncode != 0:
                raise Conflict(
                    f"volume {name} cannot be deleted: {result.stderr.strip() or 'umount failed'}",
                    hint="stop the workloads that use it first",
                )
        self._meta(account_id, name).unlink(missing_ok=True)
        self._image(account_id, name).unlink(missing_ok=True)
        shutil.rmtree(path, ignore_errors=True)

    def resize(self, account_id: str, name: str, size_gb: int) -> None:
        """Grow the limit to `size_gb` (the meta's size, then an image's file system: see
        `_grow`). Idempotent and never shrinking; a volume not made yet is left to `ensure`."""
        check_volume_request(account_id, name, size_gb)
        meta_path = self._meta(account_id, name)
        meta = read_json(meta_path)
        if meta is None or int(meta["size_gb"]) >= size_gb:
            return
        meta = {**meta, "size_gb": size_gb, "fs_gb": int(meta.get("fs_gb", meta["size_gb"]))}
        write_json_atomic(meta_path, meta)
        if meta.get("enforced"):
            self._grow(account_id, name, meta)

    def _grow(self, account_id: str, name: str, meta: dict[str, Any]) -> None:
        """Grow an image's ext4 to the meta's size, if it is smaller (`fs_gb`). Online when it
        is mounted and the kernel lets this process (the loop device is told its capacity, then
        `resize2fs`). Else offline, but only once no loop device holds the image any more (a
        workload's mount namespace keeps its loop device after the mount here is gone, and an
        ext4 grown under a mount is corrupt); while one does, it is left for the next `ensure`,
        when the next run starts."""
        size_gb, fs_gb = int(meta["size_gb"]), int(meta.get("fs_gb", meta["size_gb"]))
        if fs_gb >= size_gb:
            return
        image, path = self._image(account_id, name), self._path(account_id, name)
        with open(image, "r+b") as f:
            f.truncate(max(size_gb * self._bytes_per_gb, os.fstat(f.fileno()).st_size))
        mounted = _is_mounted(path)
        if not (mounted and _grow_online(path)):
            if mounted and not _unmounted(path):
                return _deferred(name, size_gb)
            holders = _loop_devices_of(image)
            if holders:  # still attached in a workload's namespace: mount that device again
                if mounted:
                    _run(["mount", holders[0], str(path)])
                return _deferred(name, size_gb)
            subprocess.run(["e2fsck", "-f", "-p", str(image)], capture_output=True, text=True)
            _run(["resize2fs", str(image)])
            if mounted:
                _run(["mount", "-o", "loop,noinit_itable", str(image), str(path)])
        write_json_atomic(self._meta(account_id, name), {**meta, "fs_gb": size_gb})
        return None

    def _path(self, account_id: str, name: str) -> Path:
        return self._root / account_id / name

    def _meta(self, account_id: str, name: str) -> Path:
        return self._store / account_id / f"{name}.json"

    def _image(self, account_id: str, name: str) -> Path:
        return self._store / account_id / f"{name}.img"

    def _make_image(self, image: Path, size_gb: int) -> None:
        tmp = image.with_name(f".{image.name}.tmp")
        try:
            with open(tmp, "wb") as f:
                f.truncate(size_gb * self._bytes_per_gb)  # sparse: costs nothing until written
        except OSError:
            tmp.unlink(missing_ok=True)
            raise
        # A fresh sparse file reads as zeros, so neither the journal nor the inode tables need
        # zeroing (lazy_*_init here, noinit_itable at mount): a 50 GB volume costs ~5 MB of disk.
        lazy = "lazy_itable_init=1,lazy_journal_init=1"
        _run(["mkfs.ext4", "-q", "-F", "-m", "0", "-E", lazy, str(tmp)])
        os.rename(tmp, image)


def _run(argv: list[str]) -> None:
    result = subprocess.run(argv, capture_output=True, text=True)
    if result.returncode != 0:
        detail = (result.stderr or result.stdout).strip()
        raise Conflict(f"{argv[0]} failed for a volume: {detail}", hint="check the data directory")


def _is_mounted(path: Path) -> bool:
    return os.path.ismount(path)


def _grow_online(path: Path) -> bool:
    """Grow a mounted image's ext4 in place; False if the kernel refuses (no CAP_SYS_RESOURCE
    in a container, say)."""
    device = _loop_device_of(path)
    if device is None:
        return False
    for argv in (["losetup", "-c", device], ["resize2fs", device]):
        if subprocess.run(argv, capture_output=True, text=True).returncode != 0:
            return False
    return True


def _deferred(name: str, size_gb: int) -> None:
    log.info("volume %s grows to %d GB when its workload is gone", name, size_gb)


def _loop_devices_of(image: Path) -> list[str]:
    """The loop devices attached to `image` (`losetup -j`)."""
    found = subprocess.run(["losetup", "-j", str(image)], capture_output=True, text=True)
    return [line.split(":", 1)[0] for line in found.stdout.splitlines() if line.strip()]


def _unmounted(path: Path) -> bool:
    """Unmount an idle volume; False while a workload holds it (busy)."""
    return subprocess.run(["umount", str(path)], capture_output=True, text=True).returncode == 0


def _loop_device_of(path: Path) -> str | None:
    """The loop device mounted on `path` (from /proc/self/mounts), if any."""
    target = str(path)
    try:
        with open("/proc/self/mounts") as f:
            for line in f:
                fields = line.split()
                mount_point = fields[1].replace("\\040", " ") if len(fields) > 1 else ""
                if mount_point == target and fields[0].startswith("/dev/loop"):
                    return fields[0]
    except OSError:
        return None
    return None


def _disk_usage_bytes(path: Path) -> int:
    total = 0
    for dirpath, dirnames, filenames in os.walk(path):
        for entry in (*dirnames, *filenames):
            try:
                total += os.lstat(os.path.join(dirpath, entry)).st_blocks * 512
            except FileNotFoundError:
                continue
    return total
