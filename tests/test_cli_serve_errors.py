"""`lowcostgpu serve` refuses bad input before it writes any state: one clear line, exit 2."""

from __future__ import annotations

import re
import socket
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lowcostgpu.bootstrap.serve import ServeOptions, build
from lowcostgpu.cli.main import app

GOOD_HOST = '[[region]]\nname = "eu"\n  [[region.hosts]]\n  name = "h1"\n  gpu_type = "a100-sxm4"\n'
SECOND_H1 = '  [[region.hosts]]\n  name = "h1"\n  gpu_type = "a100-sxm4"\n  gpus = 8\n'


@pytest.mark.parametrize(
    ("fleet", "words"),
    [
        (
            GOOD_HOST
            + '  gpus = 8\n  [[region.hosts]]\n  name = "h2"\n  gpu_type = "b200"\n  gpus = 8\n',
            "b200",
        ),
        (GOOD_HOST + "  gpus = -4\n", "gpus"),
        (
            GOOD_HOST + "  gpus = 8\n" + SECOND_H1,
            "h1",
        ),
    ],
    ids=["unknown-gpu-type", "negative-count", "duplicate-host"],
)
def test_a_bad_fleet_file_names_the_line_and_nothing_starts(
    tmp_path: Path, fleet: str, words: str
) -> None:
    path = tmp_path / "fleet.toml"
    path.write_text(fleet)
    data = tmp_path / "data"
    result = CliRunner().invoke(app, ["serve", "--fleet", str(path), "--data-dir", str(data)])
    assert result.exit_code == 2, result.output
    assert "line" in result.output and words in result.output
    assert "Traceback" not in result.output
    assert not data.exists()  # no partial state


def test_a_data_directory_that_cannot_be_written_is_refused(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    result = CliRunner().invoke(app, ["serve", "--data-dir", str(blocker / "data")])
    assert result.exit_code == 2, result.output
    assert "cannot be written" in result.output and "--data-dir" in result.output


def test_a_metering_interval_out_of_range_is_refused(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["serve", "--data-dir", str(tmp_path / "d"), "--metering-interval-s", "30"]
    )
    assert result.exit_code == 2
    assert "between 60 and 120" in result.output


@pytest.mark.parametrize(
    ("option", "words"),
    [
        (["--victim-policy", "cheapest"], ["unknown victim policy", "fair-least-work-lost"]),
        (["--on-demand-hold-s", "-1"], ["on_demand_hold_s", "≥ 0"]),
        (["--min-runtime-s", "-5"], ["min_runtime_s", "≥ 0"]),
    ],
    ids=["unknown-policy", "negative-hold", "negative-min-runtime"],
)
def test_a_bad_scheduler_option_is_refused_before_any_state(
    tmp_path: Path, option: list[str], words: list[str]
) -> None:
    data = tmp_path / "data"
    result = CliRunner().invoke(app, ["serve", *option, "--data-dir", str(data)])
    assert result.exit_code == 2, result.output
    assert all(w in result.output for w in words), result.output
    assert "Traceback" not in result.output
    assert not data.exists()


def _flat(output: str) -> str:
    """The CLI's words without the box Rich draws around an error, nor its line breaks."""
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", output).split())


@pytest.mark.parametrize(
    ("option", "words"),
    [
        (["--port", "99999"], "'--port': Input should be less than or equal to 65535"),
        (["--port", "65536"], "'--port': Input should be less than or equal to 65535"),
        (["--port", "0"], "'--port': Input should be greater than or equal to 1"),
        (["--port", "http"], "'--port': Input should be a valid integer"),
        (["--webhook-backoff-s", "0"], "'--webhook-backoff-s': 0.0 is not a delay"),
        (["--webhook-backoff-s", "-1"], "'--webhook-backoff-s': -1.0 is not a delay"),
        (["--webhook-backoff-s", "nan"], "'--webhook-backoff-s': nan is not a delay"),
        (["--webhook-backoff-s", "3600.5"], "give seconds > 0 and at most 3600"),
    ],
    ids=["port-99999", "port-65536", "port-zero", "port-text", *("backoff",) * 4],
)
def test_a_bad_serve_option_is_one_clear_error_and_exit_2(
    tmp_path: Path, option: list[str], words: str
) -> None:
    data = tmp_path / "data"
    result = CliRunner().invoke(app, ["serve", *option, "--data-dir", str(data)])
    assert result.exit_code == 2, result.output
    assert words in _flat(result.output), result.output
    assert "Traceback" not in result.output
    assert not data.exists()


@pytest.mark.parametrize(("value", "ok"), [(0.001, True), (3600.0, True), (3600.001, False)])
def test_the_webhook_backoff_limits_and_their_neighbours(value: float, ok: bool) -> None:
    import typer

    from lowcostgpu.cli.main import _backoff_s

    if ok:
        assert _backoff_s(value) == value
    else:
        with pytest.raises(typer.BadParameter):
            _backoff_s(value)


def test_a_port_in_use_is_refused_before_any_state(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        data = tmp_path / "data"
        result = CliRunner().invoke(app, ["serve", "--port", str(port), "--data-dir", str(data)])
    assert result.exit_code == 2, result.output
    assert f"cannot listen on 127.0.0.1:{port}: Address already in use" in result.output
    assert not data.exists()


STORAGE = '[storage]\nper_gb_month = "0.10"\n'
GPU = '[gpu.a]\non_demand_per_gpu_hour = "1"\n'


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ('currency = "EUR"\n' + STORAGE + GPU, "the catalog: unknown key 'currency'"),
        (STORAGE + 'per_gb_months = "1"\n' + GPU, "[storage]: unknown key 'per_gb_months'"),
        (STORAGE + GPU.replace("hour", "hours"), "[gpu.a]: unknown key 'on_demand_per_gpu_hours'"),
    ],
    ids=["top-level", "storage", "gpu"],
)
def test_an_unknown_catalog_key_is_refused_with_the_file_and_key(
    tmp_path: Path, text: str, words: str
) -> None:
    path = tmp_path / "catalog.toml"
    path.write_text(text)
    data = tmp_path / "data"
    result = CliRunner().invoke(app, ["serve", "--catalog", str(path), "--data-dir", str(data)])
    assert result.exit_code == 2, result.output
    assert f"{path}: " in result.output and words in _flat(result.output), result.output
    assert not data.exists()


@pytest.mark.parametrize(("flags", "refused"), [((), True), (("--no-sandbox",), False)])
def test_without_bwrap_serve_refuses_unless_no_sandbox_is_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flags: tuple[str, ...], refused: bool
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no bwrap on it
    monkeypatch.setattr("lowcostgpu.api.server.serve", _started)
    data = tmp_path / "data"
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = str(free.getsockname()[1])
    result = CliRunner().invoke(app, ["serve", "--data-dir", str(data), "--port", port, *flags])
    if refused:
        assert result.exit_code == 2, result.output
        assert "cannot be sandboxed" in result.output and "--no-sandbox" in result.output
        assert "Traceback" not in result.output and not data.exists()
    else:
        assert result.exit_code == 0, result.output
        assert "started unsandboxed" in result.output


def _started(options: ServeOptions, echo: Callable[[str], None]) -> None:
    """In place of the server: build what it serves (the check is there), then stop."""
    wired, _, _ = build(options)
    assert not wired.runner.runtime.sandboxed  # type: ignore[attr-defined]
    wired.plane.store.close()
    echo("started unsandboxed")
