"""`lowcostgpu ARGS` in its own process, as a user runs it in a second terminal: its output (a
pipe, so plain lines) read line by line as it comes, for tests that drive the CLI as a user."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
from pathlib import Path

import lowcostgpu
from waiting import wait_until

SESSION_S = 240.0  # a deadline for a failure only: a passing test returns as soon as it can


class Terminal:
    """`lowcostgpu ARGS` in its own process, its output read line by line as it comes."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        src = str(Path(lowcostgpu.__file__).parents[1])  # this checkout's code
        full = {**env, "PYTHONPATH": src, "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "lowcostgpu", *args],
            env=full,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def first(self, pattern: str) -> re.Match[str]:
        return wait_until(
            lambda: next((m for line in self.lines if (m := re.search(pattern, line))), None),
            SESSION_S,
            what=f"a line like {pattern!r} in {self.lines}",
        )

    def finish(self) -> int:
        code = self.proc.wait(timeout=SESSION_S)
        self._reader.join(timeout=10)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
