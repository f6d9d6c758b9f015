"""`lowcostgpu serve` says clearly when it cannot listen or keep its webhook schedule: one line
and a hint, exit 2, never a traceback (and never a server on some other port)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lowcostgpu.cli.main import app


def _serve(tmp_path: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["serve", "--data-dir", str(tmp_path / "d"), *args])
    return result.exit_code, result.output


@pytest.mark.parametrize("port", ["0", "65536", "99999", "-1"])
def test_a_port_outside_1_to_65535_is_refused(tmp_path: Path, port: str) -> None:
    code, output = _serve(tmp_path, "--port", port)
    assert code == 2, output
    assert f"port {port} is not a TCP port" in output and "Traceback" not in output


def test_a_port_in_use_is_a_clear_error(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, output = _serve(tmp_path, "--port", str(port))
    assert code == 2, output
    assert f"cannot listen on 127.0.0.1:{port}" in output and "--port" in output
    assert "Traceback" not in output


@pytest.mark.parametrize(
    ("backoff_s", "accepted"), [("0", False), ("-1", False), ("3600", True), ("3601", False)]
)
def test_a_webhook_backoff_must_be_above_0_and_at_most_the_cap(
    tmp_path: Path, backoff_s: str, accepted: bool
) -> None:
    with socket.socket() as taken:  # so that a server that passes the checks cannot start
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        code, output = _serve(tmp_path, "--webhook-backoff-s", backoff_s, "--port", port)
    if accepted:  # the backoff passed: it got as far as listening
        assert "cannot listen" in output, output
    else:
        assert code == 2 and "webhook backoff" in output and "Traceback" not in output, output
