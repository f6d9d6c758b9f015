"""A real Slurm cluster for the test session: `scripts/slurm-lab.sh` in a temporary directory
(slurmctld, three slurmd `node1`..`node3` with 4 fake GPUs each, partition `lowcostgpu`), started
at first use (~0.5 s) and stopped when the session ends. Each pytest-xdist worker has a lab of
its own; their starts take turns (`START_LOCK`), so that the port search of one sees the ports
of the labs started before it taken.

`require()` skips a test on a laptop without Slurm's packages (or not root), and fails it when
`CI=true` (`.ci/services/slurm.sh` installs them)."""

from __future__ import annotations

import atexit
import fcntl
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from lowcostgpu.adapters.slurm import lab

NODES, GPUS = 3, 4
START_LOCK = Path(tempfile.gettempdir()) / "lowcostgpu-slurm-lab-start.lock"


@dataclass(frozen=True)
class SlurmLab:
    root: Path

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def shared(self) -> Path:
        """The lab's shared filesystem (every node sees it: they all run on this machine)."""
        return self.root / "shared"

    @property
    def hosts(self) -> list[str]:
        return [f"node{n}" for n in range(1, NODES + 1)]

    def run(self, *argv: str) -> str:
        env = {**os.environ, "SLURM_CONF": str(self.conf)}
        return subprocess.run(argv, env=env, check=True, capture_output=True, text=True).stdout

    def cancel_all(self) -> None:
        """Cancel every job left by a test (the lab is shared by the session)."""
        ids = self.run("squeue", "-h", "-o", "%i").split()
        if ids:
            subprocess.run(
                ["scancel", *ids], env={**os.environ, "SLURM_CONF": str(self.conf)}, check=False
            )


_shared: SlurmLab | None = None


def shared() -> SlurmLab:
    global _shared
    if _shared is None:
        root = Path(tempfile.mkdtemp(prefix="lowcostgpu-slurm-"))
        with START_LOCK.open("a") as lock:  # the port search, then the daemons that bind them
            fcntl.flock(lock, fcntl.LOCK_EX)
            lab.start(root, NODES, GPUS)
        atexit.register(shutil.rmtree, root, True)
        atexit.register(lab.stop, root)  # runs first: atexit calls in reverse order
        _shared = SlurmLab(root)
    return _shared


def require() -> SlurmLab:
    import pytest

    why = lab.why_not_here()
    if why is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI needs a real Slurm: {why}")
        pytest.skip(why)
    return shared()
