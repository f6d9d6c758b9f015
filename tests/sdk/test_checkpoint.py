from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from concurrent.futures import Future
from pathlib import Path

import pytest

from lowcostgpu.sdk.checkpoint import MARKER_NAME, Checkpointer, step_dir_name
from lowcostgpu.sdk.metadata import MetadataClient
from lowcostgpu.sdk.notice import StopNotice
from lowcostgpu.sdk.testing import FakeMetadata, ManualClock
from waiting import wait_until


def writer(text: str):  # type: ignore[no-untyped-def]
    def write(tmp: Path) -> None:
        (tmp / "state.txt").write_text(text)
        (tmp / "nested").mkdir()
        (tmp / "nested" / "more.bin").write_bytes(text.encode() * 3)

    return write


def make(tmp_path: Path, **kwargs: object) -> Checkpointer:
    return Checkpointer(tmp_path / "ckpt", notice=StopNotice(), **kwargs)  # type: ignore[arg-type]


def test_no_checkpoint_yet_means_none(tmp_path: Path) -> None:
    ckpt = make(tmp_path)
    assert ckpt.latest() is None
    assert ckpt.load_latest(lambda p: p) is None


def test_a_saved_checkpoint_is_found_and_loaded(tmp_path: Path) -> None:
    ckpt = make(tmp_path)
    info = ckpt.save(7, writer("seven"))
    assert info.path.name == step_dir_name(7)
    assert (info.files, info.size_bytes) == (2, 5 + 15)
    loaded = make(tmp_path).load_latest(lambda p: (p / "state.txt").read_text())
    assert loaded is not None
    assert loaded[0].step == 7
    assert loaded[1] == "seven"


def test_keeps_only_the_last_k(tmp_path: Path) -> None:
    ckpt = make(tmp_path, keep_last=2)
    for step in (10, 20, 30, 40):
        ckpt.save(step, writer(str(step)))
    assert [info.step for info in ckpt.checkpoints()] == [30, 40]
    assert sorted(p.name for p in ckpt.directory.iterdir()) == [
        step_dir_name(30),
        step_dir_name(40),
    ]


def test_a_temp_dir_without_marker_is_never_picked_and_is_cleaned(tmp_path: Path) -> None:
    ckpt = make(tmp_path)
    ckpt.save(10, writer("good"))
    half = ckpt.directory / f".tmp-{step_dir_name(20)}-dead"
    half.mkdir()
    (half / "state.txt").write_text("half")
    assert ckpt.latest().step == 10  # type: ignore[union-attr]
    make(tmp_path)  # a restart removes leftovers of the crash
    assert not half.exists()


def test_a_step_dir_without_marker_is_ignored(tmp_path: Path) -> None:
    ckpt = make(tmp_path)
    ckpt.save(10, writer("good"))
    (ckpt.directory / step_dir_name(20)).mkdir()
    assert ckpt.latest().step == 10  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "corrupt",
    [
        "flip_payload_byte",
        "truncate_payload",
        "add_file",
        "bad_checksum_in_marker",
        "marker_not_json",
        "marker_step_mismatch",
    ],
)
def test_a_corrupted_checkpoint_is_ignored(tmp_path: Path, corrupt: str) -> None:
    ckpt = make(tmp_path)
    ckpt.save(10, writer("older"))
    newest = ckpt.save(20, writer("newer")).path
    marker_path = newest / MARKER_NAME
    marker = json.loads(marker_path.read_text())
    if corrupt == "flip_payload_byte":
        (newest / "state.txt").write_text("nawer")
    elif corrupt == "truncate_payload":
        (newest / "nested" / "more.bin").write_bytes(b"new")
    elif corrupt == "add_file":
        (newest / "extra").write_text("x")
    elif corrupt == "bad_checksum_in_marker":
        marker["checksum"] = "0" * 64
        marker_path.write_text(json.dumps(marker))
    elif corrupt == "marker_not_json":
        marker_path.write_text('{"step": 20, "checks')
    elif corrupt == "marker_step_mismatch":
        marker["step"] = 21
        marker_path.write_text(json.dumps(marker))
    loaded = ckpt.load_latest(lambda p: (p / "state.txt").read_text())
    assert loaded is not None
    assert (loaded[0].step, loaded[1]) == (10, "older")


def test_a_process_killed_mid_write_leaves_the_previous_checkpoint(tmp_path: Path) -> None:
    directory = tmp_path / "ckpt"
    make(tmp_path).save(10, writer("before the crash"))
    script = textwrap.dedent(
        f"""
        import time
        from pathlib import Path
        from lowcostgpu.sdk.checkpoint import Checkpointer
        from lowcostgpu.sdk.notice import StopNotice

        def slow_write(tmp: Path) -> None:
            (tmp / "state.txt").write_text("half")
            (Path({str(tmp_path)!r}) / "writing").touch()
            time.sleep(60)

        Checkpointer({str(directory)!r}, notice=StopNotice()).save(20, slow_write)
        """
    )
    child = subprocess.Popen([sys.executable, "-c", script])
    try:
        wait_until(
            lambda: child.poll() is not None or (tmp_path / "writing").exists(), what="the write"
        )
        assert child.poll() is None  # still writing when it is killed
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    assert any(p.name.startswith(".tmp-") for p in directory.iterdir())
    loaded = make(tmp_path).load_latest(lambda p: (p / "state.txt").read_text())
    assert loaded is not None
    assert (loaded[0].step, loaded[1]) == (10, "before the crash")


def test_a_failing_write_fn_leaves_nothing_behind(tmp_path: Path) -> None:
    ckpt = make(tmp_path)

    def broken(tmp: Path) -> None:
        (tmp / "state.txt").write_text("x")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        ckpt.save(5, broken)
    assert list(ckpt.directory.iterdir()) == []


def test_saving_the_same_step_twice_replaces_it(tmp_path: Path) -> None:
    ckpt = make(tmp_path)
    ckpt.save(5, writer("first"))
    ckpt.save(5, writer("again"))
    loaded = ckpt.load_latest(lambda p: (p / "state.txt").read_text())
    assert loaded is not None and loaded[1] == "again"
    assert [p.name for p in ckpt.directory.iterdir()] == [step_dir_name(5)]


def test_load_falls_back_when_the_newest_cannot_be_read(tmp_path: Path) -> None:
    ckpt = make(tmp_path)
    ckpt.save(1, writer("old format ok"))
    ckpt.save(2, writer("unreadable"))

    def read(path: Path) -> str:
        text = (path / "state.txt").read_text()
        if text == "unreadable":
            raise ValueError("unknown format")
        return text

    loaded = ckpt.load_latest(read)
    assert loaded is not None and loaded[1] == "old format ok"


def test_resume_counts_every_steps_from_the_loaded_step(tmp_path: Path) -> None:
    make(tmp_path).save(4200, writer("x"))
    ckpt = make(tmp_path, every_steps=100)
    ckpt.load_latest(lambda p: None)
    assert not ckpt.due(4299)
    assert ckpt.due(4300)


def test_every_s_uses_the_injected_clock(tmp_path: Path, clock: ManualClock) -> None:
    ckpt = make(tmp_path, every_s=60.0, clock=clock)
    clock.advance(59)
    assert not ckpt.due(1)
    clock.advance(1)
    assert ckpt.due(1)
    ckpt.save(1, writer("x"))
    assert not ckpt.due(2)


def test_async_save_with_a_deferred_write(tmp_path: Path) -> None:
    ckpt = make(tmp_path)
    staged = {"text": "staged"}

    def stage(tmp: Path):  # type: ignore[no-untyped-def]
        snapshot = dict(staged)
        return lambda: (tmp / "state.txt").write_text(snapshot["text"])

    future = ckpt.save_async(3, stage)
    staged["text"] = "changed after staging"
    info = future.result(timeout=30)
    assert (info.path / "state.txt").read_text() == "staged"
    assert ckpt.latest() == info


def test_async_save_with_a_future_and_its_failure(tmp_path: Path) -> None:
    ckpt = make(tmp_path)
    done: Future[None] = Future()

    def start(tmp: Path) -> Future[None]:
        (tmp / "state.txt").write_text("async")
        return done

    future = ckpt.save_async(4, start)
    assert ckpt.latest() is None  # not durable before the write finished
    done.set_result(None)
    assert future.result(timeout=30).step == 4

    failing: Future[None] = Future()
    failing.set_exception(OSError("lost the disk"))
    ckpt.save_async(5, lambda tmp: failing)
    with pytest.raises(OSError, match="lost the disk"):
        ckpt.wait()
    assert ckpt.latest().step == 4  # type: ignore[union-attr]
    assert not any(p.name.startswith(".tmp-") for p in ckpt.directory.iterdir())


def test_checkpoints_and_completion_are_reported(
    tmp_path: Path, metadata_server: FakeMetadata
) -> None:
    client = MetadataClient(metadata_server.url, metadata_server.token)
    ckpt = Checkpointer(tmp_path / "ckpt", metadata=client, notice=StopNotice())
    info = ckpt.save(42, writer("x"))
    ckpt.save_async(43, writer("y"))
    assert ckpt.finish(43) is True
    reports = metadata_server.posted("/checkpoint")
    assert [r["step"] for r in reports] == [42, 43]
    assert reports[0]["path"] == str(info.path)
    assert reports[0]["duration_s"] >= 0
    assert metadata_server.posted("/complete") == [{"step": 43}]


def _slow_writer(clock: ManualClock, seconds: float):  # type: ignore[no-untyped-def]
    def write(tmp: Path) -> None:
        writer("x")(tmp)
        clock.advance(seconds)

    return write


def test_each_report_carries_the_save_time_it_measured(
    tmp_path: Path, metadata_server: FakeMetadata, clock: ManualClock
) -> None:
    client = MetadataClient(metadata_server.url, metadata_server.token)
    ckpt = Checkpointer(tmp_path / "ckpt", metadata=client, notice=StopNotice(), clock=clock)
    ckpt.save(1, _slow_writer(clock, 12.5))
    ckpt.save(2, _slow_writer(clock, 0.25))
    reports = metadata_server.posted("/checkpoint")
    assert [r["save_s"] for r in reports] == [12.5, 0.25]
    assert [r["saves_on_notice"] for r in reports] == [False, False]


def test_an_async_save_reports_its_whole_time_not_only_the_blocking_part(
    tmp_path: Path, metadata_server: FakeMetadata, clock: ManualClock
) -> None:
    client = MetadataClient(metadata_server.url, metadata_server.token)
    ckpt = Checkpointer(tmp_path / "ckpt", metadata=client, notice=StopNotice(), clock=clock)

    def stage(tmp: Path):  # type: ignore[no-untyped-def]
        clock.advance(1.0)  # staging blocks the caller
        return lambda: (writer("y")(tmp), clock.advance(20.0))  # the background write

    ckpt.save_async(7, stage)
    ckpt.wait()
    [report] = metadata_server.posted("/checkpoint")
    assert (report["blocking_s"], report["save_s"]) == (1.0, 21.0)


@pytest.mark.parametrize(
    ("given", "installed", "polled", "claimed"),
    [
        (None, True, True, True),  # the loop polls the installed notice: it saves at one
        (None, True, False, False),  # never asked: nothing says the loop looks at the notice
        (None, False, True, False),  # no SIGTERM handler: a SIGTERM kills it before any save
        (False, True, True, False),  # told: the loop exits without saving
        (True, False, False, True),  # told: it saves by other means
    ],
)
def test_saves_on_notice_is_given_or_inferred_from_a_polled_installed_notice(
    tmp_path: Path,
    metadata_server: FakeMetadata,
    restore_sigterm: None,
    given: bool | None,
    installed: bool,
    polled: bool,
    claimed: bool,
) -> None:
    notice = StopNotice().install() if installed else StopNotice()
    client = MetadataClient(metadata_server.url, metadata_server.token)
    ckpt = Checkpointer(tmp_path / "ckpt", metadata=client, notice=notice, saves_on_notice=given)
    if polled:
        assert ckpt.should_stop() is False
    ckpt.save(3, writer("x"))
    [report] = metadata_server.posted("/checkpoint")
    assert report["saves_on_notice"] is claimed and ckpt.saves_on_notice is claimed


def test_reporting_failures_never_break_a_save(tmp_path: Path) -> None:
    client = MetadataClient("http://127.0.0.1:9", "t", timeout_s=0.2)
    ckpt = Checkpointer(tmp_path / "ckpt", metadata=client, notice=StopNotice())
    assert ckpt.save(1, writer("x")).step == 1
    assert ckpt.finish(1) is False


def test_should_stop_follows_the_notice(tmp_path: Path) -> None:
    notice = StopNotice()
    ckpt = Checkpointer(tmp_path / "ckpt", notice=notice)
    assert not ckpt.should_stop()
    notice.request()
    assert ckpt.should_stop()


def test_adaptive_uses_the_measured_cost_and_the_fleet(
    tmp_path: Path, metadata_server: FakeMetadata, clock: ManualClock
) -> None:
    metadata_server.fleet = {
        "interruptions_per_hour": 1.0,
        "median_time_between_interruptions_s": 3600.0,
    }
    client = MetadataClient(metadata_server.url, metadata_server.token)
    ckpt = Checkpointer(
        tmp_path / "ckpt", adaptive=True, metadata=client, notice=StopNotice(), clock=clock
    )

    def costs_two_seconds(tmp: Path) -> None:
        clock.advance(2.0)
        (tmp / "x").write_text("x")

    ckpt.save(1, costs_two_seconds)
    assert ckpt.policy.adaptive_interval_s() == pytest.approx(120.0)
    clock.advance(119)
    assert not ckpt.due(2)
    clock.advance(1)
    assert ckpt.due(2)


@pytest.mark.parametrize(
    ("verify_checksum", "damage", "accepted"),
    [
        (True, "same_size_edit", False),
        (False, "same_size_edit", True),  # the price of skipping the full read
        (False, "truncate", False),
        (False, "extra_file", False),
    ],
)
def test_size_only_verification_still_catches_torn_checkpoints(
    tmp_path: Path, verify_checksum: bool, damage: str, accepted: bool
) -> None:
    ckpt = make(tmp_path, verify_checksum=verify_checksum)
    ckpt.save(1, writer("older"))
    newest = ckpt.save(2, writer("newer")).path
    if damage == "same_size_edit":
        (newest / "state.txt").write_text("NEWER")
    elif damage == "truncate":
        (newest / "state.txt").write_text("ne")
    else:
        (newest / "stray.bin").write_bytes(b"x")
    assert ckpt.latest().step == (2 if accepted else 1)  # type: ignore[union-attr]


def test_an_async_save_restarts_the_interval_when_it_starts(
    tmp_path: Path, clock: ManualClock
) -> None:
    ckpt = make(tmp_path, every_steps=10, clock=clock)
    release: Future[None] = Future()
    ckpt.save_async(10, lambda tmp: release)
    assert not ckpt.due(11)  # not due again while the write is still in flight
    assert ckpt.due(20)
    release.set_result(None)
    assert ckpt.wait() is not None


RISK_ANSWER = {"action": "none", "risk": "next", "risk_since": 1000}


@pytest.mark.parametrize(
    ("warned", "saves_on_notice", "last_save_s", "due"),
    [
        (False, False, None, False),  # no warning: nothing to hurry
        (True, False, None, True),  # warned, does not save at a notice: save now
        (True, True, None, True),  # saves at a notice but never saved yet: its time is unknown
        (True, True, 299.0, False),  # its save fits the 300 s grace: the notice loses nothing
        (True, True, 300.0, False),
        (True, True, 301.0, True),  # it does not: save now
        (True, False, 10.0, True),
    ],
)
def test_an_early_save_is_due_once_per_warning_unless_a_save_at_the_notice_fits_the_grace(
    tmp_path: Path, warned: bool, saves_on_notice: bool, last_save_s: float | None, due: bool
) -> None:
    ckpt = make(tmp_path, saves_on_notice=saves_on_notice, grace_period_s=300)
    ckpt._last_save_s = last_save_s
    if warned:
        ckpt.notice.note_risk(RISK_ANSWER)
    assert ckpt.early_save_due() is due
    assert ckpt.early_save_due() is False  # once per warning


def test_a_save_records_how_long_it_took_for_the_next_early_save_decision(tmp_path: Path) -> None:
    ckpt = make(tmp_path, saves_on_notice=True, grace_period_s=300)
    ckpt.save(1, writer("one"))
    ckpt.notice.note_risk(RISK_ANSWER)
    assert ckpt.early_save_due() is False  # a real save takes far less than 300 s here
