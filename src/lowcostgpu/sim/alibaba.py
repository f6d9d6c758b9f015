"""The Alibaba GPU trace (cluster-trace-gpu-v2023, "openb", Weng et al., ATC'23) as a `Trace`.

Every mapping choice (docs/simulation.md explains each one):

- Fleet: `openb_node_list_gpu_node.csv`, one host per node (`sn`), pool (`alibaba`, model in
  lower case), its `gpu` count. `fleet_scale` < 1 keeps that share of each model's nodes (every
  k-th node, at least one per model): the pods are a sample of the cluster's, and replayed on
  the whole fleet they use at most 71 of its 6,212 GPUs at once.
- Pods without GPUs (`num_gpu` 0) are left out: they do not compete for GPUs.
- Pods never scheduled (`scheduled_time` empty, phase Pending) are left out: they never ran, so
  their work is unknown.
- Fractional GPUs (`gpu_milli` < 1000) take one whole GPU: the engine allocates whole devices.
- QoS: BE (best-effort) → interruptible; LS, Burstable and Guaranteed → on-demand (Kubernetes
  never evicts Burstable or Guaranteed pods for BE ones, and LS is latency-sensitive).
- Time origin: the trace's second 0 is the simulation's second 0. Submit = `creation_time`.
- Work = `deletion_time − scheduled_time` (at least 1 s): how long the pod ran. Pods still running
  at the end of the trace are cut there. `pod_phase` (Failed, Succeeded) is otherwise ignored.
- GPU type: `gpu_spec` (empty in the default file; a `|`-list in the gpuspec33 file) limits the
  models; the pod goes to one allowed pool, drawn in proportion to the pool's GPUs, among those
  with a host big enough for it.
- Checkpoint habits of interruptible pods are drawn per pod (`mix.CHECKPOINT_HABITS`); on-demand
  pods are never reclaimed, so theirs do not matter.
"""

from __future__ import annotations

import csv
from collections import defaultdict
from pathlib import Path
from typing import Final

from lowcostgpu.domain.capacity import CapacityClass, Host, PoolKey
from lowcostgpu.domain.errors import ConfigError
from lowcostgpu.domain.fleet import gpus_per_pool
from lowcostgpu.sim.jobs import Job, Trace, sorted_jobs
from lowcostgpu.sim.mix import checkpoint_habit, weighted_pool
from lowcostgpu.sim.traces import largest_host

REGION: Final = "alibaba"
NODES_FILE: Final = "openb_node_list_gpu_node.csv"
PODS_FILE: Final = "openb_pod_list_default.csv"
INTERRUPTIBLE_QOS: Final = frozenset({"BE"})
ON_DEMAND_QOS: Final = frozenset({"LS", "Burstable", "Guaranteed"})


def is_alibaba_dir(path: Path) -> bool:
    return path.is_dir() and (path / NODES_FILE).is_file()


def read_alibaba(
    directory: Path, *, seed: int = 0, fleet_scale: float = 1.0, pods_file: str = PODS_FILE
) -> Trace:
    hosts = read_nodes(directory / NODES_FILE, fleet_scale)
    rows = _rows(directory / pods_file)
    pools = sorted(gpus_per_pool(hosts).items())
    largest = largest_host(hosts)
    jobs: list[Job] = []
    skipped: dict[str, int] = defaultdict(int)
    end = 0
    for row in rows:
        end = max(end, int(row["deletion_time"] or 0))
        job = _job(row, pools, largest, seed, skipped)
        if job is not None:
            jobs.append(job)
    notes = {
        "format": "alibaba-gpu-v2023",
        "pods_file": pods_file,
        "pods": len(rows),
        "jobs": len(jobs),
        "skipped": dict(sorted(skipped.items())),
        "fleet_scale": fleet_scale,
        "seed": seed,
    }
    return Trace(f"alibaba:{directory.name}", tuple(hosts), sorted_jobs(jobs), end, notes)


def read_nodes(path: Path, fleet_scale: float = 1.0) -> list[Host]:
    if not 0 < fleet_scale <= 1:
        raise ConfigError(f"--fleet-scale must be in (0, 1], got {fleet_scale}", source=str(path))
    by_model: dict[str, list[Host]] = defaultdict(list)
    for row in _rows(path):
        gpus = int(row["gpu"] or 0)
        if gpus > 0 and row["model"]:
            model = row["model"].strip().lower()
            by_model[model].append(Host(row["sn"], PoolKey(REGION, model), gpus))
    hosts: list[Host] = []
    for model in sorted(by_model):
        nodes = by_model[model]
        kept = [h for i, h in enumerate(nodes) if int((i + 1) * fleet_scale) > int(i * fleet_scale)]
        hosts += kept or nodes[:1]
    return hosts


def _rows(path: Path) -> list[dict[str, str]]:
    try:
        with path.open(newline="", encoding="utf-8") as handle:
            return list(csv.DictReader(handle))
    except OSError as exc:
        raise ConfigError(
            f"the Alibaba trace file {path} cannot be read: {exc.strerror or exc}",
            hint="point --trace at the folder holding the openb_*.csv files",
            source=str(path),
        ) from None


def _job(
    row: dict[str, str],
    pools: list[tuple[PoolKey, int]],
    largest: dict[PoolKey, int],
    seed: int,
    skipped: dict[str, int],
) -> Job | None:
    gpus, qos = int(row["num_gpu"] or 0), row["qos"]
    if gpus == 0:
        skipped["no_gpu"] += 1
        return None
    if not row["scheduled_time"]:
        skipped["never_scheduled"] += 1
        return None
    if qos not in INTERRUPTIBLE_QOS | ON_DEMAND_QOS:
        skipped[f"qos_{qos}"] += 1
        return None
    allowed = {m.strip().lower() for m in row["gpu_spec"].split("|") if m.strip()}
    fitting = [
        (pool, weight)
        for pool, weight in pools
        if largest[pool] >= gpus and (not allowed or pool.gpu_type in allowed)
    ]
    pool = weighted_pool(seed, row["name"], fitting)
    if pool is None:
        skipped["no_fitting_pool"] += 1
        return None
    interruptible = qos in INTERRUPTIBLE_QOS
    interval, cost = checkpoint_habit(seed, row["name"]) if interruptible else (None, 0)
    return Job(
        id=row["name"],
        submit_s=int(row["creation_time"]),
        work_s=max(1, int(row["deletion_time"]) - int(row["scheduled_time"])),
        gpus=gpus,
        pool=pool,
        capacity_class=CapacityClass.INTERRUPTIBLE if interruptible else CapacityClass.ON_DEMAND,
        checkpoint_interval_s=interval,
        checkpoint_cost_s=cost,
    )
