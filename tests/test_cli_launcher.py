"""`make run`'s launcher step (scripts/cli-launcher.sh): a link on PATH only where that writes
nothing of anyone else's, else the line to type; always how to use the CLI."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parents[1] / "scripts" / "cli-launcher.sh"


def _run(home: Path, venv: Path, path_dirs: list[Path]) -> str:
    env = {
        **os.environ,
        "HOME": str(home),
        "PATH": ":".join([*map(str, path_dirs), "/usr/bin:/bin"]),
    }
    done = subprocess.run(
        ["sh", str(SCRIPT), str(venv)], env=env, capture_output=True, text=True, check=True
    )
    return done.stdout


@pytest.fixture
def venv(tmp_path: Path) -> Path:
    (tmp_path / "checkout" / ".venv" / "bin").mkdir(parents=True)
    (tmp_path / "checkout" / ".venv" / "bin" / "lowcostgpu").write_text("#!/bin/sh\n")
    return tmp_path / "checkout" / ".venv"


@pytest.mark.parametrize(
    ("local_bin_on_path", "already_there", "linked", "says"),
    [
        (True, None, True, "installed a launcher"),
        (True, "a link of ours", True, "installed a launcher"),  # an older checkout's: replaced
        (True, "someone else's file", False, "/bin/activate"),
        (False, None, False, "/bin/activate"),
    ],
)
def test_the_launcher_is_linked_only_where_it_touches_nothing_else(
    tmp_path: Path,
    venv: Path,
    local_bin_on_path: bool,
    already_there: str | None,
    linked: bool,
    says: str,
) -> None:
    home = tmp_path / "home"
    local_bin = home / ".local" / "bin"
    local_bin.mkdir(parents=True)
    link = local_bin / "lowcostgpu"
    if already_there == "a link of ours":
        link.symlink_to(tmp_path / "old" / ".venv" / "bin" / "lowcostgpu")
    elif already_there:
        link.write_text("theirs\n")
    out = _run(home, venv, [local_bin] if local_bin_on_path else [])
    assert says in out and "lowcostgpu login" in out and "lowcostgpu --help" in out
    if linked:
        assert link.is_symlink() and link.resolve() == (venv / "bin" / "lowcostgpu").resolve()
    elif already_there:
        assert link.read_text() == "theirs\n"
    else:
        assert not link.exists()


def test_an_active_venv_is_said_to_be_on_path_and_nothing_is_written(
    tmp_path: Path, venv: Path
) -> None:
    home = tmp_path / "home"
    (home / ".local" / "bin").mkdir(parents=True)
    out = _run(home, venv, [venv / "bin", home / ".local" / "bin"])
    assert "lowcostgpu is on your PATH" in out
    assert not (home / ".local" / "bin" / "lowcostgpu").exists()
