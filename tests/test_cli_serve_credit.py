"""`lowcostgpu serve --credit-lost-work`: the operator's option reaches the plane's config, and
it is off unless given."""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lowcostgpu.bootstrap.serve import ServeOptions, build
from lowcostgpu.cli.main import app


@pytest.mark.parametrize(("flags", "on"), [((), False), (("--credit-lost-work",), True)])
def test_the_credit_option_reaches_the_plane_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flags: tuple[str, ...], on: bool
) -> None:
    seen: list[bool] = []

    def started(options: ServeOptions, echo: Callable[[str], None]) -> None:
        wired, _, _ = build(options)  # what the server would serve, then stop
        seen.append(wired.plane.config.credit_lost_work)
        wired.plane.store.close()
        echo("built")

    monkeypatch.setattr("lowcostgpu.api.server.serve", started)
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = str(free.getsockname()[1])
    args = ["serve", "--data-dir", str(tmp_path / "d"), "--port", port, "--no-sandbox", *flags]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert seen == [on]
