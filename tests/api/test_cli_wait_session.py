"""The issue's acceptance session, as a user lives it in two terminals against a real server:

    $ lowcostgpu launch --gpu a100-sxm4 --type interruptible --template pytorch \\
        --volume ckpts:1GB --wait -- --steps 120 --every-steps 20 --step-delay-s 0.1
    (meanwhile, in another terminal)
    $ lowcostgpu launch --gpu a100-sxm4 --type on-demand --gpus 2 -- sleep 6

The first one is a real process (its stdout a pipe: plain status lines), the second one and the
rest (`show`, `logs`, `bill`) Typer's runner. The on-demand launch reclaims the training's GPU at
a checkpoint; the wait prints the interruption, the requeue (queued, ETA unknown: nothing known
ends), the restart from the same step, the finish and the bill. Lines are matched by their
stable parts: money and time formats belong to `cli.output`.
"""

from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path

import pytest
from api_server import ADMIN_KEY, Api
from typer.testing import CliRunner

from lowcostgpu.cli.main import app
from terminal import Terminal
from waiting import wait_until

TRAIN = ["--steps", "120", "--every-steps", "20", "--step-delay-s", "0.1"]
SESSION_S = 240.0


@pytest.fixture
def user(
    api: Api, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[CliRunner, dict[str, str]]:
    env = {
        **os.environ,
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "LOWCOSTGPU_URL": api.url,
        "COLUMNS": "200",
    }
    env.pop("LOWCOSTGPU_ADMIN_KEY", None)
    for key in ("XDG_CONFIG_HOME", "LOWCOSTGPU_URL", "COLUMNS"):
        monkeypatch.setenv(key, env[key])
    cli = CliRunner()
    created = json.loads(
        _run(cli, "accounts", "create", "waiter", "--admin-key", ADMIN_KEY, "--json")
    )
    _run(cli, "topup", created["id"], "10", "--admin-key", ADMIN_KEY)
    monkeypatch.setenv("LOWCOSTGPU_API_KEY", created["api_key"])
    return cli, {**env, "LOWCOSTGPU_API_KEY": created["api_key"]}


def _run(cli: CliRunner, *args: str, code: int = 0) -> str:
    result = cli.invoke(app, list(args))
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    return result.output


def _show(cli: CliRunner, instance_id: str) -> dict[str, object]:
    found: dict[str, object] = json.loads(_run(cli, "show", instance_id, "--json"))
    return found


def test_the_product_pages_session_through_launch_wait(
    user: tuple[CliRunner, dict[str, str]],
) -> None:
    cli, env = user
    launch = ["launch", "--gpu", "a100-sxm4", "--type", "interruptible", "--template", "pytorch"]
    term = Terminal(
        [*launch, "--volume", "ckpts:1GB", "--grace-period-s", "10", "--wait", "--", *TRAIN], env
    )
    try:
        first = term.first(r"^✓ instance (i-\S+) (queued|starting|running)\b")
        instance_id = first.group(1)
        assert term.lines[0].startswith(f"✓ instance {instance_id} ")  # the id comes first
        wait_until(
            lambda: (_show(cli, instance_id)["last_checkpoint_step"] or 0) >= 40,  # type: ignore[operator]
            SESSION_S,
            what="a checkpoint at step 40",
        )
        out = _run(
            cli,
            "launch",
            "--gpu",
            "a100-sxm4",
            "--type",
            "on-demand",
            "--gpus",
            "2",
            "--",
            "sleep",
            "6",
        )
        assert re.match(r"✓ instance i-\S+ (starting|running)", out), out
        assert term.finish() == 0, "\n".join(term.lines)
    finally:
        term.kill()
    text = "\n".join(term.lines)
    step = re.search(r"^# \d{2}:\d{2} interrupted — checkpoint step (\d+) on volume$", text, re.M)
    assert step is not None, text
    resumed = re.search(
        r"^# \d{2}:\d{2} capacity free — auto-restarted, resumed (\d+)$", text, re.M
    )
    assert resumed is not None and resumed.group(1) == step.group(1), text
    assert re.search(rf"^… running · checkpoint step {step.group(1)}$", text, re.M), text
    # Requeued behind on-demand work that has no known end: queued, and no made-up ETA.
    assert re.search(r"^… queued · position 1 · ETA unknown · checkpoint step \d+$", text, re.M), (
        text
    )
    assert re.search(r"^✓ instance i-\S+ running · \$", text, re.M), text
    assert re.search(r"^✓ run finished · [\d.]+ GPU-hrs · \$\d", term.lines[-1]), text
    assert "Traceback" not in text and "~0 s" not in text
    assert _show(cli, instance_id)["status"] == "succeeded"
    assert f"resumed from step {step.group(1)}" in _run(cli, "logs", instance_id)
    bill = _run(cli, "bill")
    assert "interruptible" in bill and "on-demand" in bill and "total $" in bill


def test_ctrl_c_detaches_and_the_instance_keeps_running(
    user: tuple[CliRunner, dict[str, str]],
) -> None:
    cli, env = user
    term = Terminal(["launch", "--gpu", "a100-sxm4", "--wait", "--", "sleep", "60"], env)
    try:
        instance_id = term.first(r"^✓ instance (i-\S+) ").group(1)
        term.first(r"^… ")  # the status line: the wait is following
        term.proc.send_signal(signal.SIGINT)
        assert term.finish() == 0, "\n".join(term.lines)
    finally:
        term.kill()
    assert (
        term.lines[-1]
        == f"detached — {instance_id} keeps running; lowcostgpu logs -f {instance_id}"
    )
    assert _show(cli, instance_id)["status"] in ("starting", "running")
    _run(cli, "stop", instance_id)
