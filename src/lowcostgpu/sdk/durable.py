"""Durable file-system primitives: fsync, atomic file writes, content checksums of a tree.

A rename is atomic but not durable until the directory holding it is fsynced; a file's bytes are
not durable until the file is. Getting both orders right is what makes "a checkpoint either fully
exists or does not exist" true after a power cut or a SIGKILL.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from pathlib import Path

CHUNK_BYTES = 1 << 20


def fsync_dir(path: Path) -> None:
    """Make renames/creations inside `path` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(root: Path) -> None:
    """fsync every file and directory under `root` (deepest directories first), then `root`."""
    for dirpath, _dirnames, filenames in os.walk(root, topdown=False):
        for name in filenames:
            fsync_file(Path(dirpath) / name)
        fsync_dir(Path(dirpath))


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write `data` to `path` so that readers see the old file or the whole new one, never half.

    Temp names start with '.tmp-' so cleaners can spot leftovers of a crash.
    """
    tmp = path.with_name(f".tmp-{path.name}.{uuid.uuid4().hex[:8]}")
    try:
        with open(tmp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def tree_checksum(root: Path, exclude: frozenset[str] = frozenset()) -> tuple[str, int, int]:
    """(sha256 hex, file count, total bytes) over relative paths, sizes and contents under `root`.

    Paths are part of the hash, so a renamed or missing file changes it, not only changed bytes.
    """
    digest = hashlib.sha256()
    count = 0
    total = 0
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.name not in exclude)
    for path in files:
        rel = path.relative_to(root).as_posix()
        size = path.stat().st_size
        digest.update(f"{rel}\0{size}\0".encode())
        with open(path, "rb") as handle:
            while chunk := handle.read(CHUNK_BYTES):
                digest.update(chunk)
        count += 1
        total += size
    return digest.hexdigest(), count, total
