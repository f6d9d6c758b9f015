from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lowcostgpu.sdk.batch import (
    PROGRESS_FILE,
    BatchInputChanged,
    BatchProgress,
    fingerprint_of,
)
from lowcostgpu.sdk.metadata import MetadataClient
from lowcostgpu.sdk.notice import StopNotice
from lowcostgpu.sdk.testing import FakeMetadata, ManualClock


def make(tmp_path: Path, **kwargs: object) -> BatchProgress:
    return BatchProgress(tmp_path / "out", notice=StopNotice(), **kwargs)  # type: ignore[arg-type]


def items(count: int, calls: list[int]) -> list[tuple[str, object]]:
    def produce(i: int):  # type: ignore[no-untyped-def]
        def run() -> dict[str, bytes]:
            calls.append(i)
            return {f"item_{i}.txt": f"output of {i}\n".encode()}

        return run

    return [(f"item-{i}", produce(i)) for i in range(count)]


def test_done_items_are_skipped_after_a_restart(tmp_path: Path) -> None:
    calls: list[int] = []
    first = make(tmp_path)
    for key, produce in items(3, calls):
        first.commit(key, produce())  # type: ignore[operator]
    again = make(tmp_path)
    assert again.done_count == 3
    assert again.run(items(5, calls)) is True  # type: ignore[arg-type]
    assert calls == [0, 1, 2, 3, 4]
    assert (tmp_path / "out" / "item_4.txt").read_text() == "output of 4\n"


def test_a_stop_request_ends_the_run_between_items(tmp_path: Path) -> None:
    notice = StopNotice()
    progress = BatchProgress(tmp_path / "out", notice=notice)
    calls: list[int] = []
    work = items(5, calls)

    def stop_after_two():  # type: ignore[no-untyped-def]
        for n, item in enumerate(work):
            if n == 2:
                notice.request()
            yield item

    assert progress.run(stop_after_two()) is False  # type: ignore[arg-type]
    assert calls == [0, 1]


def test_an_output_without_a_record_is_redone_with_the_same_bytes(tmp_path: Path) -> None:
    progress = make(tmp_path)
    progress.commit("item-0", {"item_0.txt": b"zero"})
    (tmp_path / "out" / "item_1.txt").write_bytes(b"one")  # landed, but no record: crashed
    again = make(tmp_path)
    assert not again.is_done("item-1")
    again.commit("item-1", {"item_1.txt": b"one"})
    assert (tmp_path / "out" / "item_1.txt").read_bytes() == b"one"


def test_a_torn_last_record_is_dropped(tmp_path: Path) -> None:
    progress = make(tmp_path)
    progress.commit("a", {"a.txt": b"A"})
    log = tmp_path / "out" / PROGRESS_FILE
    with open(log, "ab") as handle:
        handle.write(b'{"key": "b", "outp')
    again = make(tmp_path)
    assert (again.is_done("a"), again.is_done("b")) == (True, False)
    again.commit("b", {"b.txt": b"B"})
    assert make(tmp_path).done_count == 2


def test_a_missing_or_truncated_output_is_redone(tmp_path: Path) -> None:
    progress = make(tmp_path)
    progress.commit("a", {"a.txt": b"AAAA"})
    progress.commit("b", {"b.txt": b"BBBB"})
    (tmp_path / "out" / "a.txt").unlink()
    (tmp_path / "out" / "b.txt").write_bytes(b"BB")
    assert make(tmp_path).done_count == 0


def test_committing_a_done_item_again_is_refused(tmp_path: Path) -> None:
    progress = make(tmp_path)
    progress.commit("a", {"a.txt": b"A"})
    with pytest.raises(ValueError, match="already done"):
        progress.commit("a", {"a.txt": b"A"})


@pytest.mark.parametrize("name", ["../escape.txt", "/etc/passwd", "_progress.jsonl", ".tmp-x"])
def test_outputs_must_stay_inside_the_batch_directory(tmp_path: Path, name: str) -> None:
    with pytest.raises(ValueError, match="inside the batch dir"):
        make(tmp_path).commit("a", {name: b"x"})


def test_other_input_on_restart_is_refused_with_advice(tmp_path: Path) -> None:
    make(tmp_path, fingerprint=fingerprint_of("input v1"))
    make(tmp_path, fingerprint=fingerprint_of("input v1"))  # the same input is fine
    with pytest.raises(BatchInputChanged, match="fresh output directory"):
        make(tmp_path, fingerprint=fingerprint_of("input v2"))


def test_progress_and_completion_are_reported_but_rate_limited(
    tmp_path: Path, metadata_server: FakeMetadata, clock: ManualClock
) -> None:
    client = MetadataClient(metadata_server.url, metadata_server.token)
    progress = make(tmp_path, metadata=client, clock=clock, report_every_s=10.0)
    for i in range(5):
        progress.commit(f"i{i}", {f"{i}.txt": b"x"})
        clock.advance(3)
    assert [r["step"] for r in metadata_server.posted("/checkpoint")] == [1, 5]
    assert progress.finish() is True
    assert metadata_server.posted("/complete") == [{"step": 5}]


def test_sigkill_during_commits_leaves_consistent_progress(tmp_path: Path) -> None:
    """Kill a writer at a random moment many times: recorded items always have whole outputs."""
    out = tmp_path / "out"
    script = textwrap.dedent(
        f"""
        from lowcostgpu.sdk.batch import BatchProgress
        from lowcostgpu.sdk.notice import StopNotice
        p = BatchProgress({str(out)!r}, notice=StopNotice())
        for i in range(400):
            if not p.is_done(f"k{{i}}"):
                p.commit(f"k{{i}}", {{f"o{{i}}.bin": bytes([i % 251]) * 50_000}})
        """
    )
    for delay_s in (0.3, 0.5, 0.7):
        child = subprocess.Popen([sys.executable, "-c", script])
        time.sleep(delay_s)
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)
    done = make(tmp_path)
    assert done.done_count == 400
    for i in range(400):
        assert (out / f"o{i}.bin").read_bytes() == bytes([i % 251]) * 50_000
    assert not list(out.glob(".tmp-*"))


@settings(max_examples=30, deadline=None)
@given(count=st.integers(min_value=0, max_value=8), cut=st.integers(min_value=0, max_value=400))
def test_any_torn_progress_log_loads_as_a_prefix_of_the_commits(count: int, cut: int) -> None:
    """Cut the log at any byte (a SIGKILL mid-append): what loads is a prefix, never garbage."""
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "out"
        progress = BatchProgress(directory, notice=StopNotice())
        for i in range(count):
            progress.commit(f"k{i}", {f"o{i}.bin": bytes([i]) * (i + 1)})
        log = directory / PROGRESS_FILE
        raw = log.read_bytes() if log.exists() else b""
        if raw:
            log.write_bytes(raw[: min(cut, len(raw))])
        loaded = BatchProgress(directory, notice=StopNotice())
        done = [i for i in range(count) if loaded.is_done(f"k{i}")]
        assert done == list(range(len(done)))
        assert loaded.done_count == len(done)
        loaded.commit(f"k{count}", {f"o{count}.bin": b"next"})  # appends cleanly after a cut
        assert BatchProgress(directory, notice=StopNotice()).is_done(f"k{count}")
