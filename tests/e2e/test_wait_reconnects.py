"""`launch --wait` outlives a server restart: the server is SIGKILLed while the wait follows a
run, the wait says `server unreachable, reconnecting…` (once), and when a new server is up on the
same store it says so and follows the run to its end and its bill, exit code 0."""

from __future__ import annotations

import os
from pathlib import Path

from test_crash_safety import Server

from lowcostgpu.cli.wait import BACK, DOWN
from terminal import Terminal


def test_a_server_restart_does_not_end_the_wait(tmp_path: Path) -> None:
    server = Server(tmp_path, f"sqlite:///{tmp_path / 'lowcostgpu.db'}")
    server.start()
    term: Terminal | None = None
    try:
        server.sign_up()
        env = {
            **os.environ,
            "XDG_CONFIG_HOME": str(tmp_path / "config"),
            "LOWCOSTGPU_URL": server.url,
            "LOWCOSTGPU_API_KEY": server.headers["authorization"].removeprefix("Bearer "),
        }
        term = Terminal(["launch", "--gpu", "a100-sxm4", "--wait", "--", "sleep", "15"], env)
        instance_id = term.first(r"^✓ instance (i-\S+) ").group(1)
        term.first(r"^… running")
        server.kill()
        term.first(f"^{DOWN}$")
        server.start()
        term.first(f"^{BACK}$")
        assert term.finish() == 0, "\n".join(term.lines)
    finally:
        if term is not None:
            term.kill()
        if server.proc is not None and server.proc.poll() is None:
            server.kill()
    text = "\n".join(term.lines)
    assert term.lines.count(DOWN) == 1 and term.lines.count(BACK) == 1, text
    assert term.lines[0].startswith(f"✓ instance {instance_id} "), text
    assert term.lines[-1].startswith("✓ run finished · "), text
    assert "Traceback" not in text and "error:" not in text, text
