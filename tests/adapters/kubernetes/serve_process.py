"""`lowcostgpu serve` as an operator runs it, in a process of its own: started, `kill -9`ed and
restarted on the same data directory; its API called with the admin key."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
from apiserver import free_port

from waiting import wait_until

ADMIN_KEY = "lcg_admin_k8s-serve-0123456789abcdef"


def fleet_file(path: Path, regions: dict[str, list[str]], gpus: int = 8) -> Path:
    """A fleet file of a100-sxm4 hosts, `gpus` each, per region."""
    text = ""
    for region, hosts in regions.items():
        text += f'[[region]]\nname = "{region}"\n'
        for host in hosts:
            text += f'  [[region.hosts]]\n  name = "{host}"\n  gpu_type = "a100-sxm4"\n'
            text += f"  gpus = {gpus}\n"
    path.write_text(text)
    return path


class ServeProcess:
    """One server on a free port; `argv`: the options after the data directory, port and key."""

    def __init__(self, tmp: Path, argv: list[str]) -> None:
        self.tmp, self.port, self.starts = tmp, free_port(), 0
        self.url = f"http://127.0.0.1:{self.port}"
        self.argv = [sys.executable, "-m", "lowcostgpu", "serve", "--data-dir", str(tmp / "data")]
        self.argv += ["--port", str(self.port), "--admin-key", ADMIN_KEY, *argv]
        self.proc: subprocess.Popen[bytes] | None = None
        self.headers = {"authorization": f"Bearer {ADMIN_KEY}"}

    def start(self) -> None:
        self.starts += 1
        log = (self.tmp / f"serve-{self.starts}.log").open("wb")
        self.proc = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT)

        def leading() -> bool:
            assert self.proc is not None and self.proc.poll() is None, self.log()
            try:
                return bool(httpx.get(f"{self.url}/healthz", timeout=1).json()["leading"])
            except (httpx.HTTPError, ValueError):
                return False

        wait_until(leading, 60, "serve leading")

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def request(self, method: str, path: str, **kw: Any) -> httpx.Response:
        kw.setdefault("headers", self.headers)
        return httpx.request(method, f"{self.url}{path}", timeout=30, **kw)

    def call(self, method: str, path: str, **kw: Any) -> Any:
        response = self.request(method, path, **kw)
        assert response.status_code < 400, response.text
        return response.json() if response.content else None

    def log(self) -> str:
        return "".join(p.read_text() for p in sorted(self.tmp.glob("serve-*.log")))[-4000:]
