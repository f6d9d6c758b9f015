"""How fast the Slurm runtime is on a real Slurm (issue 17; figures in docs/slurm.md).

    .venv/bin/python bench/slurm_timings.py                 # a throw-away lab, 7 runs
    .venv/bin/python bench/slurm_timings.py --slurm-conf /etc/slurm/slurm.conf \\
        --shared-dir /shared/lcg-bench --runs 9 --json out.json

Everything goes through the real `SlurmRuntime` (sbatch, squeue, scancel, the batch shell's
records), with a small Python workload that writes the epoch time when it starts, when its
SIGTERM handler runs, and just before it exits. Each run, on the first node of the partition:

- `submit_to_running`: from `start()` to the first `observe()` that reports it running;
- `submit_to_workload`: from `start()` to the workload's own first line of Python;
- `sigterm_to_workload`: from `signal(SIGTERM)` to the workload's handler (it then exits);
- `exit_to_exited`: from the workload's exit to the first `observe()` that reports it exited;
- `exit_to_requeued_running`: from the workload's exit to the first `observe()` that reports a
  new run (a new job, as the plane's requeue starts one) running, started as soon as the exit is
  seen. The control plane's loop observes at least every `poll_interval_s` (1 s) and acts on what
  it sees in the same tick; here `observe()` is polled every `--poll-s` (0.05 s), so the plane's
  figure is this one plus up to that interval.

Without `--slurm-conf` it starts `scripts/slurm-lab.sh` (root, Debian's Slurm packages) with one
node of one GPU, and stops it at the end. Prints median and range of each figure.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from lowcostgpu.adapters.slurm import Slurm, SlurmRuntime, lab
from lowcostgpu.adapters.slurm.fleet import partition_nodes
from lowcostgpu.ports.runtime import WorkloadReport, WorkloadStart

WORKLOAD = """
import signal, sys, time
from pathlib import Path
d = Path(sys.argv[1])
def note(name):
    (d / (name + ".tmp")).write_text(repr(time.time()))
    (d / (name + ".tmp")).rename(d / name)
def on_term(*_):
    note("sigterm")
    note("exit")
    sys.exit(143)
signal.signal(signal.SIGTERM, on_term)
note("started")
while True:
    time.sleep(0.01)
"""
FIGURES = (
    "submit_to_running",
    "submit_to_workload",
    "sigterm_to_workload",
    "exit_to_exited",
    "exit_to_requeued_running",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--slurm-conf", type=Path, help="a cluster (default: a throw-away lab)")
    parser.add_argument("--partition", default="lowcostgpu")
    parser.add_argument("--shared-dir", type=Path, help="on a filesystem every node mounts")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--poll-s", type=float, default=0.05)
    parser.add_argument("--json", type=Path, help="write every measurement here")
    args = parser.parse_args()
    with _cluster(args.slurm_conf) as (conf, lab_shared):
        shared = Path(tempfile.mkdtemp(prefix="lcg-bench-", dir=args.shared_dir or lab_shared))
        try:
            samples = _measure(Slurm(conf), args.partition, shared, args.runs, args.poll_s)
        finally:
            shutil.rmtree(shared, ignore_errors=True)
    for name in FIGURES:
        values = samples[name]
        print(
            f"{name:<26} median {statistics.median(values):6.2f} s   "
            f"range {min(values):.2f}–{max(values):.2f} s   ({len(values)} runs)"
        )
    if args.json:
        args.json.write_text(json.dumps(samples, indent=2))


def _measure(
    slurm: Slurm, partition: str, shared: Path, runs: int, poll_s: float
) -> dict[str, list[float]]:
    node = next(n for n in partition_nodes(slurm, partition) if n.gpus >= 1)
    (shared / "workload.py").write_text(WORKLOAD)
    runtime = SlurmRuntime(slurm, shared / "state", partition=partition)
    samples: dict[str, list[float]] = {name: [] for name in FIGURES}
    for run in range(runs):
        for name, value in _one_run(runtime, node.name, shared, run, poll_s).items():
            samples[name].append(value)
    return samples


def _one_run(
    runtime: SlurmRuntime, host: str, shared: Path, run: int, poll_s: float
) -> dict[str, float]:
    control = shared / f"control-{run}"
    control.mkdir()
    argv = (sys.executable, str(shared / "workload.py"), str(control))
    first, second = f"a-{run}-0", f"a-{run}-1"
    figures: dict[str, float] = {}
    submitted = time.time()
    runtime.start(WorkloadStart(f"i-bench{run}", first, host, (0,), 0, argv))
    figures["submit_to_running"] = _seen(runtime, first, "running", poll_s) - submitted
    figures["submit_to_workload"] = _stamp(control / "started") - submitted
    signalled = time.time()
    runtime.signal(first, "SIGTERM")
    exited = _seen(runtime, first, "exited", poll_s)
    exit_at = _stamp(control / "exit")
    figures["sigterm_to_workload"] = _stamp(control / "sigterm") - signalled
    figures["exit_to_exited"] = exited - exit_at
    runtime.start(WorkloadStart(f"i-bench{run}", second, host, (0,), 1, argv))  # the requeue
    figures["exit_to_requeued_running"] = _seen(runtime, second, "running", poll_s) - exit_at
    runtime.kill(second)
    _seen(runtime, second, "exited", poll_s)
    for alloc in (first, second):
        runtime.forget(alloc)
    return figures


def _seen(runtime: SlurmRuntime, alloc: str, phase: str, poll_s: float) -> float:
    """The time of the first observe() that reports `alloc` in `phase` (60 s at most)."""
    deadline = time.monotonic() + 60

    def found() -> WorkloadReport | None:
        return next((r for r in runtime.observe() if r.allocation_id == alloc), None)

    while time.monotonic() < deadline:
        report = found()
        if report is not None and report.phase == phase:
            return time.time()
        if report is not None and report.phase == "start_failed":
            raise SystemExit(f"{alloc} failed to start: {report.reason}")
        time.sleep(poll_s)
    raise SystemExit(f"{alloc} was not {phase} within 60 s")


def _stamp(path: Path, wait: Callable[[float], None] = time.sleep) -> float:
    for _ in range(600):
        if path.exists():
            return float(path.read_text())
        wait(0.05)
    raise SystemExit(f"the workload wrote no {path.name}")


@contextmanager
def _cluster(conf: Path | None) -> Iterator[tuple[Path, Path | None]]:
    """The given cluster, or a throw-away lab on this machine (one node, one GPU)."""
    if conf is not None:
        yield conf, None
        return
    root = Path(tempfile.mkdtemp(prefix="lcg-bench-slurm-"))
    try:
        yield lab.start(root, nodes=1, gpus=1), root / "shared"
    finally:
        lab.stop(root)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
