"""The per-workload shim: starts one workload, waits for it, records its exit. Stdlib only.

Like containerd-shim, it exists so that a workload outlives the control plane: the server starts
the shim in a session of its own (so a SIGKILL of the server, or of its process group, does not
reach it), and the shim — not the server — is the workload's parent. Everything it learns goes to
files in the allocation's state directory, each written atomically (tmp + fsync + rename), so a
restarted server reads the same facts:

- `shim.json`       first thing the shim does: "a shim ran for this allocation";
- `workload.json`   pid (= pgid), `/proc` start time (guards against pid reuse), start time;
- `exit.json`       exit code, once the workload's main process is gone;
- `start_failed.json` the reason when the command could not be executed (nothing runs then).

The shim holds an exclusive `flock` on `<dir>/lock` for its whole life (the server took it and
passed the descriptor on): a lock that can be taken means no shim is alive, whatever the pids say.

Exit codes: a normal exit is its status (0–255); death by signal N is 128 + N, like a shell
(SIGTERM → 143, SIGKILL → 137). When the workload's main process ends, whatever it left in its
process group is SIGKILLed, as when a container's main process ends: no orphan outlives its run.

Sandboxed (a `sandbox` entry in spec.json, see sandbox.py), the workload's main process is bwrap,
and this same file runs once more inside the sandbox as `shim.py --inner` to set limits, drop to
the workload's uid and execute the command (`inner`).

Run as `python -I shim.py <allocation_dir> <lock_fd>`: a script path (not `-m`) so that it needs
nothing but the standard library, whatever the server's environment or virtualenv.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

SHIM_RECORD = "shim.json"
WORKLOAD_RECORD = "workload.json"
EXIT_RECORD = "exit.json"
START_FAILED_RECORD = "start_failed.json"
SPEC_RECORD = "spec.json"
LOCK_FILE = "lock"


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    """Readers see the old file or the whole new one, never half of it, even across a crash."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f)
        f.flush()
        os.fsync(f.fileno())
    os.rename(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def read_json(path: Path) -> dict[str, Any] | None:
    """The record, or None when it is not there (yet)."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return data if isinstance(data, dict) else None


def process_start_ticks(pid: int, *, zombie_too: bool = False) -> int | None:
    """Field 22 of /proc/<pid>/stat (clock ticks after boot); None when the pid is gone (or is a
    zombie, unless `zombie_too`).

    A pid can be reused by an unrelated process; the pair (pid, start ticks) cannot.
    """
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as f:
            stat = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    if fields[0] in ("Z", "X") and not zombie_too:
        return None
    return int(fields[19])


def exit_code_of(wait_status: int) -> int:
    """Exit status as a shell reports it: the status itself, or 128 + N for a death by signal N."""
    code = os.waitstatus_to_exitcode(wait_status)
    return code if code >= 0 else 128 - code


def describe_start_error(exc: OSError, argv0: str, cwd: str) -> str:
    """A short reason that names what was wrong: the command, or the working directory."""
    what = (
        f"working directory {cwd}"
        if exc.filename is not None and str(exc.filename) == cwd
        else f"command {argv0!r}"
    )
    reason = (exc.strerror or type(exc).__name__).lower()
    return f"cannot start {what}: {reason}"


def _spawn(spec: dict[str, Any], log: Any) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        spec["argv"],
        env=spec["env"],
        cwd=spec["cwd"],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        process_group=0,  # its own group: killpg(pid) reaches it and its children, not the shim
        close_fds=True,
    )


def _spawn_sandboxed(spec: dict[str, Any], log: Any) -> subprocess.Popen[bytes]:
    """bwrap, then this file's `inner` inside it, then the workload (see sandbox.py).

    bwrap (the main process, pid = pgid) ignores SIGTERM/SIGINT/SIGHUP: a SIGTERM to the group
    must reach the workload, which `inner` gives back the default disposition, and leave bwrap
    waiting for it, so that the grace period and the exit code (bwrap exits with 128 + N when
    its workload dies of signal N) are what they are without a sandbox. `inner` reports on a
    pipe: "ok" when it is about to exec the command, a JSON reason when it cannot.
    """
    box = spec["sandbox"]
    read_fd, write_fd = os.pipe()
    inner = [sys.executable, "-I", str(Path(__file__).resolve()), "--inner", str(write_fd)]
    payload = json.dumps({k: box[k] for k in ("uid", "rlimits")} | {"cwd": spec["cwd"]})
    argv = [*box["argv_prefix"], *inner, payload, *spec["argv"]]
    cgroup = box.get("cgroup")
    try:
        with _signals_ignored():
            proc = subprocess.Popen(
                argv,
                env=spec["env"],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                process_group=0,
                close_fds=True,
                pass_fds=(write_fd,),
                preexec_fn=(lambda: _join_cgroup(cgroup)) if cgroup else None,
            )
    finally:
        os.close(write_fd)
    word = _read_line(read_fd)
    if word == b"ok":
        return proc
    proc.wait()
    if word:
        raise SandboxedStartError(str(json.loads(word)["reason"]))
    raise SandboxedStartError(f"the sandbox could not be set up (bwrap exit {proc.returncode})")


class SandboxedStartError(Exception):
    """The sandboxed command could not be executed; the reason says why."""


@contextlib.contextmanager
def _signals_ignored() -> Any:
    kept = {
        n: signal.signal(n, signal.SIG_IGN) for n in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
    }
    try:
        yield
    finally:
        for signum, handler in kept.items():
            signal.signal(signum, handler)


def prepare_cgroup(box: dict[str, Any]) -> None:
    """Create the workload's cgroup v2 group with its limits (before the workload joins it)."""
    path = Path(box["cgroup"])
    path.mkdir(exist_ok=True)
    if box.get("memory_max_bytes"):
        (path / "memory.max").write_text(str(box["memory_max_bytes"]))
    (path / "pids.max").write_text(str(box["pids_max"]))


def _join_cgroup(cgroup: str) -> None:
    with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
        f.write("0")  # "0" is the writer: this child, before it executes bwrap


def remove_cgroup(box: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):
        os.rmdir(box["cgroup"])


def inner(argv: list[str]) -> int:
    """In the sandbox: limits, drop to the workload's uid, default signals, exec the command.

    What can make the exec fail is checked first (working directory, command found and
    executable by that uid) and reported as one line on the status pipe: the pipe cannot end
    at the exec, bwrap's own processes keep it open.
    """
    import resource
    import shutil

    status_fd, config, command = int(argv[0]), json.loads(argv[1]), argv[2:]
    try:
        for name, value in config["rlimits"].items():
            limit = getattr(resource, f"RLIMIT_{name}")
            hard = resource.getrlimit(limit)[1]
            capped = value if hard == resource.RLIM_INFINITY else min(value, hard)
            resource.setrlimit(limit, (capped, capped))
        uid = int(config["uid"])
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, signal.SIG_DFL)
        os.chdir(config["cwd"])
        path = shutil.which(command[0])
        if path is None:
            code = errno.EACCES if os.path.exists(command[0]) else errno.ENOENT
            raise OSError(code, os.strerror(code), command[0])
    except OSError as exc:
        reason = describe_start_error(exc, command[0], config["cwd"])
        os.write(status_fd, json.dumps({"reason": reason}).encode() + b"\n")
        return 127
    os.write(status_fd, b"ok\n")
    os.close(status_fd)
    try:
        os.execv(path, command)
    except OSError as exc:
        print(
            f"lowcostgpu: {describe_start_error(exc, command[0], config['cwd'])}", file=sys.stderr
        )
    return 127


def _read_line(fd: int) -> bytes:
    """One line from the inner stage, or b"" when the sandbox ended before it spoke."""
    data = b""
    with os.fdopen(fd, "rb", buffering=0) as f:
        while not data.endswith(b"\n"):
            chunk = f.read(4096)
            if not chunk:
                break
            data += chunk
    return data.strip()


def _wait_and_clean(pid: int) -> int:
    """Wait for the main process; SIGKILL what it left in its group before its pid is released."""
    while True:
        try:
            os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
            break
        except ChildProcessError:
            break
        except InterruptedError:
            continue
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)  # the zombie leader still holds the group id: no reuse
    _, status = os.waitpid(pid, 0)
    return exit_code_of(status)


def run(alloc_dir: Path) -> int:
    write_json_atomic(alloc_dir / SHIM_RECORD, {"pid": os.getpid(), "at": time.time()})
    spec = read_json(alloc_dir / SPEC_RECORD)
    if spec is None:
        print("lowcostgpu shim: spec.json is missing", file=sys.stderr)
        return 2
    box = spec.get("sandbox")
    if box and box.get("cgroup"):
        prepare_cgroup(box)
    with open(spec["log_path"], "ab", buffering=0) as log:
        try:
            proc = _spawn_sandboxed(spec, log) if box else _spawn(spec, log)
        except (OSError, SandboxedStartError) as exc:
            reason = (
                str(exc)
                if isinstance(exc, SandboxedStartError)
                else describe_start_error(exc, spec["argv"][0], spec["cwd"])
            )
            log.write(f"lowcostgpu: {reason}\n".encode())
            failed = {"reason": reason, "at": time.time()}
            write_json_atomic(alloc_dir / START_FAILED_RECORD, failed)
            return 0
    ticks = process_start_ticks(proc.pid, zombie_too=True)
    record = {"pid": proc.pid, "start_ticks": ticks, "at": time.time()}
    write_json_atomic(alloc_dir / WORKLOAD_RECORD, record)
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)  # set after the spawn: ignored signals are inherited
    code = _wait_and_clean(proc.pid)
    proc.returncode = code  # reaped by hand; tell Popen so that it does not try again
    write_json_atomic(alloc_dir / EXIT_RECORD, {"exit_code": code, "at": time.time()})
    if box and box.get("cgroup"):
        remove_cgroup(box)
    return 0


def main(argv: list[str]) -> int:
    if argv[1] == "--inner":
        return inner(argv[2:])
    alloc_dir, lock_fd = Path(argv[1]), int(argv[2])
    os.set_inheritable(lock_fd, False)  # the lock is the shim's alone; the workload never holds it
    return run(alloc_dir)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
