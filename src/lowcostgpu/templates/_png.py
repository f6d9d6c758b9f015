"""A tiny PNG writer (stdlib zlib): 8-bit RGB, no filters. Deterministic bytes for equal input."""

from __future__ import annotations

import struct
import zlib

import numpy as np
from numpy.typing import NDArray

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _chunk(kind: bytes, data: bytes) -> bytes:
    body = kind + data
    return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body) & 0xFFFFFFFF)


def encode_png(rgb: NDArray[np.uint8]) -> bytes:
    """PNG bytes of an (height, width, 3) uint8 image."""
    if rgb.ndim != 3 or rgb.shape[2] != 3 or rgb.dtype != np.uint8:
        raise ValueError(f"need an (h, w, 3) uint8 array, got {rgb.shape} {rgb.dtype}")
    height, width, _ = rgb.shape
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit RGB
    rows = np.concatenate([np.zeros((height, 1), np.uint8), rgb.reshape(height, -1)], axis=1)
    return (
        PNG_SIGNATURE
        + _chunk(b"IHDR", header)
        + _chunk(b"IDAT", zlib.compress(rows.tobytes(), 9))
        + _chunk(b"IEND", b"")
    )
