"""The sandbox of a local workload: what it sees, who it runs as, what it may use.

Without it every workload runs as the server's user with the whole file system in view: it can
read other accounts' volumes, the store and the token keys (issue 16). With it (`serve` default),
the shim starts the workload under Debian's `bubblewrap` (`bwrap`), run as root so that it can
build a mount namespace without a user namespace (a user namespace made by root would map the
workload's uid back to root outside):

- a new mount, pid, IPC and UTS namespace; the root is an empty tmpfs into which only these are
  mounted: the system read-only (/usr, /etc, /opt and the /bin, /lib… links), the Python the
  server runs on read-only (its prefixes and its `sys.path`, so `python -m …` templates work),
  a fresh /proc and a minimal /dev, a private /tmp, and the workload's volume (at the path
  `LOWCOSTGPU_VOLUME` names) or its own empty working directory — read-write;
- the data directory is covered with an empty tmpfs even where a read-only path above includes it;
- an unprivileged uid/gid of its own, one per account (`SandboxUsers`, a stable range from
  `uid_base`, no passwd entry needed), with no capabilities and `no_new_privs`;
- only the device files of its GPUs (`/dev/nvidiaN` and the control devices) when the machine has
  them; `CUDA_VISIBLE_DEVICES` then counts from 0, as in a container;
- resource limits: a cgroup v2 group (`memory.max`, `pids.max`) where the unified hierarchy has
  those controllers, and rlimits always (processes per uid, open files, no core dumps).

The network is shared (the metadata endpoint is on the server's loopback). docs/security.md says
what this protects against and what it does not.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lowcostgpu.domain.errors import ConfigError

UID_BASE = 200_000
UID_COUNT = 65_536
SYSTEM_RO = ("/usr", "/etc", "/opt")
SYSTEM_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
GPU_CONTROL_DEVICES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset")
CGROUP_ROOT = Path("/sys/fs/cgroup")
CGROUP_GROUP = "lowcostgpu"


@dataclass(frozen=True, slots=True)
class SandboxPolicy:
    """How workloads are confined; `hidden` are the paths no workload may see (the data dir)."""

    bwrap: str
    hidden: tuple[str, ...] = ()
    uid_base: int = UID_BASE
    pids_max: int = 4096
    open_files_max: int = 65_536
    memory_max_bytes: int | None = None  # cgroup v2 only: rlimits cannot cap a GPU process' RSS
    dev_dir: str = "/dev"


def find_bwrap() -> str | None:
    return shutil.which("bwrap")


def sandbox_policy(hidden: Sequence[Path], *, require: bool = True) -> SandboxPolicy | None:
    """The policy when bwrap is here and works; else a `ConfigError` naming `--no-sandbox`."""
    bwrap = find_bwrap()
    problem = "bubblewrap (bwrap) is not installed" if bwrap is None else probe(bwrap)
    if problem is None and bwrap is not None:
        return SandboxPolicy(bwrap, hidden=tuple(str(Path(p).resolve()) for p in hidden))
    if not require:
        return None
    raise ConfigError(
        f"workloads cannot be sandboxed: {problem}",
        hint="install it (Debian: apt-get install bubblewrap; run as root), or start with "
        "--no-sandbox to run workloads unconfined as the server's user (see docs/security.md)",
    )


def probe(bwrap: str) -> str | None:
    """Why bwrap cannot build a sandbox here (not root, no namespaces…), or None when it can."""
    if os.geteuid() != 0:
        return "the server must run as root to give each workload a uid of its own"
    argv = [bwrap, *_namespaces(), *_system(), "--", "/usr/bin/true"]
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{bwrap} could not be run: {exc}"
    if result.returncode != 0:
        return f"{bwrap} failed: {result.stderr.strip() or f'exit {result.returncode}'}"
    return None


def _namespaces() -> list[str]:
    return ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]


def _system() -> list[str]:
    """The system, read-only: /usr, /etc, /opt and the /bin, /lib… links (or directories)."""
    argv = []
    for path in SYSTEM_RO:
        if os.path.isdir(path):
            argv += ["--ro-bind", path, path]
    for link in SYSTEM_LINKS:
        if os.path.islink(link):
            argv += ["--symlink", os.readlink(link), link]
        elif os.path.isdir(link):
            argv += ["--ro-bind", link, link]
    return argv


def python_paths() -> list[str]:
    """What the server's Python needs to run in the sandbox, read-only (outside /usr)."""
    found = {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(sys.executable)}
    found.update(p for p in sys.path if os.path.isabs(p) and os.path.isdir(p))
    found.add(str(Path(__file__).resolve().parents[2]))  # this package: the shim, the templates
    real = {os.path.realpath(p) for p in found} | found
    return sorted(p for p in real if not p.startswith(SYSTEM_RO) and p not in ("/", "/tmp"))


@dataclass(frozen=True, slots=True)
class SandboxRun:
    """One workload's sandbox, as the shim needs it (written into its spec.json)."""

    uid: int
    argv_prefix: tuple[str, ...]  # bwrap and its options, up to and including "--"
    cuda_visible_devices: str
    rlimits: dict[str, int]
    cgroup: str | None
    memory_max_bytes: int | None
    pids_max: int

    def to_json(self) -> dict[str, Any]:
        return {
            "uid": self.uid,
            "argv_prefix": list(self.argv_prefix),
            "rlimits": self.rlimits,
            "cgroup": self.cgroup,
            "memory_max_bytes": self.memory_max_bytes,
            "pids_max": self.pids_max,
        }


def sandbox_run(
    policy: SandboxPolicy, uid: int, writable: str, gpu_indices: Sequence[int], alloc_id: str
) -> SandboxRun:
    """The bwrap command line that confines a workload to `writable` and its GPUs."""
    argv = [policy.bwrap, *_namespaces(), "--die-with-parent"]
    argv += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    argv += [*_system(), "--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--tmpfs", "/tmp"]
    for path in python_paths():
        argv += [*_parents(path), "--ro-bind", path, path]
    for path in policy.hidden:
        argv += ["--tmpfs", path]  # even where a read-only path above contains it
    argv += [*_parents(writable), "--bind", writable, writable]
    devices, visible = _gpu_devices(policy.dev_dir, gpu_indices)
    for device in devices:
        argv += ["--dev-bind", device, device.replace(policy.dev_dir, "/dev", 1)]
    argv.append("--")
    rlimits = {"NPROC": policy.pids_max, "NOFILE": policy.open_files_max, "CORE": 0}
    cgroup = cgroup_for(alloc_id)
    return SandboxRun(
        uid, tuple(argv), visible, rlimits, cgroup, policy.memory_max_bytes, policy.pids_max
    )


def _parents(path: str) -> list[str]:
    """Make the mount point's parents 0755: bwrap makes them 0700, and the workload is not root."""
    argv = []
    for parent in reversed(Path(path).parents[:-1]):
        argv += ["--perms", "0755", "--dir", str(parent)]
    return argv


def _gpu_devices(dev_dir: str, gpu_indices: Sequence[int]) -> tuple[list[str], str]:
    """The GPUs' device files and what CUDA_VISIBLE_DEVICES is inside (renumbered from 0 when
    only these devices are there, as in a container; the indices themselves otherwise)."""
    own = [os.path.join(dev_dir, f"nvidia{i}") for i in sorted(gpu_indices)]
    if not all(os.path.exists(p) for p in own) or not own:
        return [], ",".join(str(i) for i in gpu_indices)
    control = [os.path.join(dev_dir, name) for name in GPU_CONTROL_DEVICES]
    devices = own + [p for p in control if os.path.exists(p)]
    return devices, ",".join(str(i) for i in range(len(own)))


def cgroup_for(alloc_id: str) -> str | None:
    """A cgroup v2 directory for the workload when the unified hierarchy offers memory and pids
    to a group of ours; None otherwise (then only rlimits apply)."""
    parent = CGROUP_ROOT / CGROUP_GROUP
    try:
        controllers = (CGROUP_ROOT / "cgroup.controllers").read_text().split()
        if not {"memory", "pids"} <= set(controllers):
            return None
        parent.mkdir(exist_ok=True)
        (CGROUP_ROOT / "cgroup.subtree_control").write_text("+memory +pids")
        (parent / "cgroup.subtree_control").write_text("+memory +pids")
    except OSError:
        return None
    return str(parent / alloc_id.replace(":", "_"))


class SandboxUsers:
    """One uid per account, stable across restarts: a map kept in the state directory.

    Stable so that a volume (owned by its account's uid, mode 0700) opens again for the next run.
    """

    def __init__(self, state_dir: Path, base: int = UID_BASE) -> None:
        self._path = state_dir / ".uids.json"
        self._lock = state_dir / ".uids.lock"
        self._base = base
        self._known: dict[str, int] = {}

    def uid(self, owner: str) -> int:
        if owner in self._known:
            return self._known[owner]
        fd = os.open(self._lock, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # two servers on one state dir never share a uid
            table = self._read()
            if owner not in table:
                if len(table) >= UID_COUNT:
                    raise ConfigError("the sandbox's uid range is used up", hint="see docs")
                table[owner] = self._base + len(table)
                tmp = self._path.with_suffix(".tmp")
                tmp.write_text(json.dumps(table))
                os.replace(tmp, self._path)
            self._known = table
        finally:
            os.close(fd)
        return table[owner]

    def _read(self) -> dict[str, int]:
        try:
            data = json.loads(self._path.read_text())
        except FileNotFoundError:
            return {}
        return {str(k): int(v) for k, v in data.items()}


def own_tree(path: Path, uid: int) -> None:
    """Give `path` (a volume or a working directory) to `uid`, mode 0700: a volume made before
    the sandbox, or by the server, opens to its workload and to nobody else."""
    if path.stat().st_uid != uid:
        for dirpath, dirnames, filenames in os.walk(path):
            for name in (*dirnames, *filenames):
                os.lchown(os.path.join(dirpath, name), uid, uid)
        os.chown(path, uid, uid)
    os.chmod(path, 0o700)
