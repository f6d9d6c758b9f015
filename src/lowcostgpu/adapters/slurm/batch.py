"""The batch script of one run, and the records it leaves in the allocation's directory.

The batch shell is the run's shim: it starts the workload as a job step (`srun`), because Slurm
signals steps, not the batch shell (`scancel --signal=TERM` without `--full`; with `--full`
srun itself gets the SIGTERM and answers "forcing job termination": it kills the step, and the
workload's grace with it). When the step ends the shell writes the exit code to the allocation's
directory on the shared filesystem, so an exit is known however long the control plane was away
(Slurm forgets finished jobs after `MinJobAge`). Records are written whole (`mv` of a temporary
file): a reader sees a record complete or not at all.

Records (one line each): `started` (the epoch time the step was launched), `exit` (`<code>
<epoch time>`), `start_failed` (the reason). Markers written by the runtime: `sigterm` and
`killed`, read before the step starts, so a signal that raced the job's start is not lost.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence

STARTED, EXIT, START_FAILED = "started", "exit", "start_failed"
SIGTERM_MARK, KILLED_MARK = "sigterm", "killed"
ENV_FILE, JOB_FILE, LOG_FILE, SPEC_FILE = "env.sh", "job", "log", "spec.json"
JOB_NAME_PREFIX = "lcg-"


def env_file(env: Mapping[str, str]) -> str:
    """The workload's environment as `export K=V` lines the batch shell sources (mode 0600: it
    holds the instance token, which must not appear on a command line or in `scontrol show`)."""
    return "".join(f"export {name}={shlex.quote(value)}\n" for name, value in sorted(env.items()))


def batch_script(directory: str, cwd: str, argv: Sequence[str], allocation_id: str) -> str:
    """The script `sbatch` runs on the allocation's host (see the module docstring)."""
    q = shlex.quote
    command = " ".join(q(a) for a in argv)
    return f"""#!/bin/bash
# lowcostgpu workload {allocation_id}
d={q(directory)}
record() {{ printf '%s\\n' "$2" > "$d/$1.tmp" && mv -f "$d/$1.tmp" "$d/$1"; }}
set -a; . "$d/{ENV_FILE}"; set +a
fail() {{ record {START_FAILED} "$1 on $(hostname)"; exit 0; }}
cd {q(cwd)} 2>/dev/null || fail "working directory "{q(cwd)}" is missing"
[ -e "$d/{KILLED_MARK}" ] && {{ record {EXIT} "137 $EPOCHREALTIME"; exit 0; }}
[ -e "$d/{SIGTERM_MARK}" ] && {{ record {EXIT} "143 $EPOCHREALTIME"; exit 0; }}
command -v {q(argv[0])} >/dev/null 2>&1 ||
    fail "cannot run "{q(argv[0])}": no such file or directory (or not executable)"
record {STARTED} "$EPOCHREALTIME"
srun --ntasks=1 --export=ALL -- {command}
record {EXIT} "$? $EPOCHREALTIME"
"""
