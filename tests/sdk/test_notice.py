from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading

import pytest

from lowcostgpu.sdk.metadata import MetadataClient
from lowcostgpu.sdk.notice import StopNotice
from lowcostgpu.sdk.testing import FakeMetadata, ManualClock
from signal_race import signal_on_every_line
from waiting import wait_until


@pytest.mark.usefixtures("restore_sigterm")
def test_sigterm_sets_the_flag_and_records_the_time(clock: ManualClock) -> None:
    notice = StopNotice(clock=clock).install()
    assert not notice.requested
    clock.advance(5)
    os.kill(os.getpid(), signal.SIGTERM)
    assert notice.wait(5.0)
    assert notice.requested
    assert notice.requested_at == clock.now
    assert notice.reason == "SIGTERM"


@pytest.mark.usefixtures("restore_sigterm")
def test_install_is_idempotent() -> None:
    notice = StopNotice()
    assert notice.install() is notice.install()
    assert signal.getsignal(signal.SIGTERM) == notice._on_sigterm


def test_install_off_the_main_thread_is_refused_with_advice() -> None:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            StopNotice().install()
        except RuntimeError as error:
            errors.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert len(errors) == 1
    assert "main thread" in str(errors[0])


def test_only_the_first_request_counts(clock: ManualClock) -> None:
    notice = StopNotice(clock=clock)
    notice.request("first")
    clock.advance(10)
    notice.request("second")
    assert (notice.reason, notice.requested_at) == ("first", 1000.0)


def test_module_level_should_stop_installs_the_handler_lazily() -> None:
    script = textwrap.dedent(
        """
        import os, signal
        from lowcostgpu.sdk.notice import should_stop
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
        assert should_stop() is False
        os.kill(os.getpid(), signal.SIGTERM)
        print("survived", should_stop())
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "survived True"


def test_watch_turns_a_metadata_notice_into_a_stop(metadata_server: FakeMetadata) -> None:
    notice = StopNotice()
    notice.watch(MetadataClient(metadata_server.url, metadata_server.token), interval_s=0.05)
    assert not notice.wait(0.2)
    metadata_server.notice = {"action": "stop", "notice_at": 1.0, "deadline": 301.0}
    assert notice.wait(5.0)
    assert notice.reason == "metadata notice"


RISK = {"action": "none", "risk": "next", "risk_since": 1000}


@pytest.mark.parametrize(
    ("answers", "saves"),
    [
        ([RISK], [True, False, False]),  # one early save per episode, however often asked
        ([None], [False]),  # not at risk: nothing to do
        ([{"action": "none"}], [False]),  # a server that sends no risk
        ([RISK, RISK, RISK], [True, False]),  # the same episode polled again: no second save
        ([RISK, None, {**RISK, "risk_since": 2000}], [True, False]),  # a new episode, once
        ([RISK, None], [False]),  # the risk cleared before the loop looked: no save
    ],
)
def test_early_save_is_due_once_per_risk_episode(
    answers: list[dict[str, object] | None], saves: list[bool]
) -> None:
    notice = StopNotice()
    for answer in answers:
        notice.note_risk(answer)
    assert [notice.early_save_due() for _ in saves] == saves


def test_no_early_save_once_a_stop_is_requested() -> None:
    notice = StopNotice()
    notice.note_risk(RISK)
    notice.request("SIGTERM")
    assert notice.early_save_due() is False


def test_watch_turns_a_risk_answer_into_one_early_save(metadata_server: FakeMetadata) -> None:
    notice = StopNotice()
    notice.watch(MetadataClient(metadata_server.url, metadata_server.token), interval_s=0.05)
    metadata_server.notice = dict(RISK)
    wait_until(lambda: notice.at_risk, what="the watcher to see the risk")
    assert notice.early_save_due() and not notice.early_save_due()
    assert not notice.requested  # advice, not a stop
    metadata_server.notice = None  # the pool recovered: 404 again
    wait_until(lambda: not notice.at_risk, what="the watcher to see the risk clear")


def test_a_sigterm_at_any_line_of_the_main_threads_wait_wakes_it_and_never_hangs() -> None:
    """A handler that took the wait's own lock would hang the workload until SIGKILL (seen once
    in CI: the pytorch drill timed out). The signal lands on every line of the wait in turn."""
    result = signal_on_every_line(
        """
        from lowcostgpu.sdk.notice import StopNotice
        for k in range(1, 60):
            notice = StopNotice().install()
            signal_at_line(k, notice.wait, lambda s: notice.wait(s) and notice.reason == "SIGTERM")
        """
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "all woke"
