"""A workload for the end-to-end tests: counts steps, checkpoints on its volume, obeys SIGTERM.

It records each run in `runs.jsonl` on the volume (pid, restart count, the step it resumed from,
when it started and when it stopped), so the test can check that every restart resumed from the
last checkpoint and measure the real running time to compare with the meter.

Arguments: the number of steps, then anything (the test's folder, which marks its workloads
among the machine's processes): ignored.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

from lowcostgpu.sdk.env import WorkloadEnv
from lowcostgpu.sdk.metadata import MetadataClient

TOTAL_STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 400
STEP_S = 0.05
stop = False
sigterm_at: float | None = None


def on_sigterm(signum: int, frame: object) -> None:
    global stop, sigterm_at
    stop = True
    sigterm_at = sigterm_at or time.time()


def main() -> int:
    signal.signal(signal.SIGTERM, on_sigterm)
    env = WorkloadEnv.from_environ()
    meta = MetadataClient.from_env(env)
    volume = env.volume
    ckpt = volume / "step.txt"
    step = int(ckpt.read_text()) if ckpt.exists() else 0
    run: dict[str, object] = {
        "pid": os.getpid(),
        "restart": env.restart_count,
        "resumed": step,
        "start": time.time(),
    }
    while step < TOTAL_STEPS and not stop:
        time.sleep(STEP_S)
        step += 1
        if step % 10 == 0 or stop:
            save(ckpt, step)
            meta.report_checkpoint(step)
    run["stop"] = time.time()
    run["sigterm"] = sigterm_at
    save(ckpt, step)
    run["step"] = step
    with (volume / "runs.jsonl").open("a") as f:
        f.write(json.dumps(run) + "\n")
        f.flush()
        os.fsync(f.fileno())
    if step >= TOTAL_STEPS:
        meta.report_complete(step)
    return 0


def save(path: Path, step: int) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(str(step))
    with tmp.open("rb+") as f:
        os.fsync(f.fileno())
    tmp.replace(path)


if __name__ == "__main__":
    sys.exit(main())
