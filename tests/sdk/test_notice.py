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
