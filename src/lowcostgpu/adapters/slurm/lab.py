"""A throw-away Slurm cluster on this machine (`scripts/slurm-lab.sh`), for the demo without a
cluster, the timing benchmark and the tests: one place that knows whether one can be made here,
which ports it takes, and how it is started and stopped."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from pathlib import Path

from lowcostgpu.domain.errors import Unavailable

SCRIPT = Path(__file__).parents[4] / "scripts" / "slurm-lab.sh"  # in a source checkout
BINARIES = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "sinfo")
START_TIMEOUT_S = 60
INSTALL = "apt-get install --no-install-recommends slurmctld slurmd slurm-client munge"


def why_not_here() -> str | None:
    """Why no lab can be made on this machine, or None if one can."""
    missing = [b for b in BINARIES if shutil.which(b) is None]
    if missing:
        return f"Slurm's {', '.join(missing)} are not installed ({INSTALL})"
    if os.geteuid() != 0:
        return "this is not root (slurmd must setuid to the job's user)"
    if not SCRIPT.exists():
        return f"{SCRIPT} is not here (it ships in a source checkout of lowcostgpu)"
    return None


def free_port_base(nodes: int) -> int:
    """A port with the next `nodes` ports free too: slurmctld's, then one per slurmd."""
    for base in range(27017, 40000, 16):
        try:
            for port in range(base, base + nodes + 1):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
    raise Unavailable("no free ports on loopback for a Slurm lab", hint="try again")


def start(root: Path, nodes: int, gpus: int) -> Path:
    """Start a lab in `root` (its nodes `node1`.., `gpus` fake GPUs each); its slurm.conf."""
    os.chmod(root, 0o755)  # slurmd and munged insist on the directories' modes
    argv = [str(SCRIPT), "start", str(root), str(nodes), str(gpus), str(free_port_base(nodes))]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=START_TIMEOUT_S)
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip()[-400:]
        raise Unavailable(
            f"the throw-away Slurm cluster did not start: {said}",
            hint=f"see the logs in {root}/var/log",
        )
    return root / "slurm.conf"


def stop(root: Path) -> None:
    """Cancel the lab's jobs and stop its daemons (what `start` started, by pid file)."""
    subprocess.run([str(SCRIPT), "stop", str(root)], capture_output=True, check=False)
