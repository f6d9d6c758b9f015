"""The render template: interrupted renders produce byte-identical frames, each written once."""

from __future__ import annotations

import random
import re
import signal
import struct
import sys
import zlib
from pathlib import Path

import numpy as np

from lowcostgpu.sdk.drill import drill, run_once, workload_env
from lowcostgpu.sdk.testing import FakeMetadata
from lowcostgpu.templates._png import encode_png

FRAMES = 14
ARGV = [
    sys.executable,
    "-m",
    "lowcostgpu.templates.render",
    f"--frames={FRAMES}",
    "--width=48",
    "--height=36",
    "--frame-delay-s=0.05",
]
FRAME_LINE = re.compile(r"^frame (\d+) written$")


def frames(volume: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((volume / "frames").glob("frame_*.png"))}


def test_interrupted_render_matches_the_uninterrupted_one(
    tmp_path: Path, metadata_server: FakeMetadata
) -> None:
    reference = tmp_path / "reference"
    assert run_once(ARGV, workload_env(reference, 0)).returncode == 0
    expected = frames(reference)
    assert len(expected) == FRAMES

    at = sorted(random.Random(3).sample(range(1, FRAMES - 3), 4))
    plan = [
        (at[0], signal.SIGTERM),
        (at[1], signal.SIGTERM),
        (at[2], signal.SIGKILL),
        (at[3], signal.SIGTERM),
    ]
    endpoint = {"LOWCOSTGPU_METADATA_URL": metadata_server.url, "LOWCOSTGPU_TOKEN": "secret-token"}
    volume = tmp_path / "interrupted"
    runs = drill(ARGV, volume, plan, FRAME_LINE, extra_env=endpoint)

    assert frames(volume) == expected
    written = [int(m.group(1)) for r in runs for m in map(FRAME_LINE.match, r.lines) if m]
    assert sorted(set(written)) == list(range(FRAMES))
    # Each frame is rendered once, except at most the one in flight at the SIGKILL.
    assert len(written) - len(set(written)) <= 1
    for run in runs[1:]:
        assert any(line.startswith("resumed at item ") for line in run.lines)
    for run in runs:
        if run.signal_sent == signal.SIGTERM:
            assert re.fullmatch(r"checkpoint step \d+ on volume", run.lines[-1])
    assert metadata_server.posted("/complete") == [{"step": FRAMES}]


def test_png_writer_produces_a_valid_png() -> None:
    image = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3)
    data = encode_png(image)
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == (3, 2)
    idat_len = struct.unpack(">I", data[33:37])[0]
    rows = zlib.decompress(data[41 : 41 + idat_len])
    assert rows == b"\x00" + image[0].tobytes() + b"\x00" + image[1].tobytes()
