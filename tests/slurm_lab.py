"""A real Slurm cluster for the test session: `scripts/slurm-lab.sh` in a temporary directory
(slurmctld, three slurmd `node1`..`node3` with 4 fake GPUs each, partition `lowcostgpu`), started
at first use (~0.5 s) and stopped when the session ends.

`require()` skips a test on a laptop without Slurm's packages (or not root), and fails it when
`CI=true` (`.ci/services/slurm.sh` installs them)."""

from __future__ import annotations

import atexit
import os
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

SCRIPT = Path(__file__).parents[1] / "scripts" / "slurm-lab.sh"
NODES, GPUS = 3, 4
BINARIES = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "sinfo")


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


def missing() -> str | None:
    absent = [b for b in BINARIES if shutil.which(b) is None]
    if absent:
        return f"Slurm is not installed here (missing {', '.join(absent)}): apt-get install \
--no-install-recommends slurmctld slurmd slurm-client munge"
    if os.geteuid() != 0:
        return "the Slurm lab needs root (slurmd setuids to the job's user)"
    return None


def _free_port_base() -> int:
    """A base port with the next NODES ports free too (slurmctld, then one per slurmd)."""
    for base in range(27017, 40000, 16):
        try:
            for port in range(base, base + NODES + 1):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
    raise RuntimeError("no free ports for a Slurm lab")


def shared() -> SlurmLab:
    global _shared
    if _shared is None:
        root = Path(tempfile.mkdtemp(prefix="lowcostgpu-slurm-"))
        os.chmod(root, 0o755)
        argv = [str(SCRIPT), "start", str(root), str(NODES), str(GPUS), str(_free_port_base())]
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"the Slurm lab did not start:\n{done.stdout}\n{done.stderr}")
        lab = SlurmLab(root)
        atexit.register(shutil.rmtree, root, True)
        atexit.register(subprocess.run, [str(SCRIPT), "stop", str(root)], capture_output=True)
        _shared = lab
    return _shared


def require() -> SlurmLab:
    import pytest

    why = missing()
    if why is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI needs a real Slurm: {why}")
        pytest.skip(why)
    return shared()
