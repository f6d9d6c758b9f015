"""Our CSV trace format, and how a job's GPU type finds its pool in the fleet.

One job a row, with the header

    submit_s,duration_s,gpus,gpu_type,class,checkpoint_interval_s,checkpoint_cost_s

`submit_s` seconds from the start of the trace; `duration_s` seconds of useful work; `gpu_type` a
GPU type of the fleet, or `region/gpu_type` to name the pool (a bare type goes to the region with
the most GPUs of that type); `class` on-demand or interruptible (aliases standard, preemptible);
the two checkpoint columns are empty for a job that never checkpoints; a cost without an
interval is an interruptible job that saves only at a notice (one save of that many seconds at
SIGTERM). An optional last column, `nodes` (empty: 1), makes a row a multi-node interruptible job:
that many hosts with `gpus` GPUs each, placed all at once. A bad row is refused with an error
that names its line.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable
from pathlib import Path

from lowcostgpu.domain.capacity import CapacityClass, Host, PoolKey
from lowcostgpu.domain.errors import ConfigError, InvalidRequest
from lowcostgpu.domain.fleet import gpus_per_pool
from lowcostgpu.sim.jobs import Job, Trace, sorted_jobs

HEADER = (
    "submit_s",
    "duration_s",
    "gpus",
    "gpu_type",
    "class",
    "checkpoint_interval_s",
    "checkpoint_cost_s",
)
WITH_NODES = (*HEADER, "nodes")  # the optional multi-node column


def pool_index(hosts: Iterable[Host]) -> dict[str, PoolKey]:
    """GPU type (and region/type) -> pool: a bare type goes to its largest pool."""
    totals = gpus_per_pool(hosts)
    index: dict[str, PoolKey] = {}
    for pool, _gpus in sorted(totals.items(), key=lambda kv: (-kv[1], kv[0])):
        index.setdefault(pool.gpu_type, pool)
        index[f"{pool.region}/{pool.gpu_type}"] = pool
    return index


def largest_host(hosts: Iterable[Host]) -> dict[PoolKey, int]:
    largest: dict[PoolKey, int] = {}
    for h in hosts:
        largest[h.pool] = max(largest.get(h.pool, 0), h.gpu_count)
    return largest


def read_csv_trace(path: Path, hosts: list[Host]) -> Trace:
    try:
        with path.open(newline="", encoding="utf-8") as handle:
            rows = list(csv.reader(handle))
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(
            f"trace {path} cannot be read: {exc}",
            hint="give a CSV file with the header " + ",".join(HEADER),
            source=str(path),
        ) from None
    return parse_csv_rows(rows, hosts, source=str(path))


def parse_csv_rows(rows: list[list[str]], hosts: list[Host], *, source: str) -> Trace:
    header = tuple(c.strip() for c in rows[0]) if rows else ()
    if header not in (HEADER, WITH_NODES):
        raise ConfigError(
            f"{source}, line 1: the header must be {','.join(HEADER)} (then ,nodes if you like)",
            hint="write that header on the first line, then one job a row",
            source=source,
            line=1,
        )
    pools, largest = pool_index(hosts), largest_host(hosts)
    jobs = []
    for number, row in enumerate(rows[1:], start=2):
        if not any(cell.strip() for cell in row):
            continue  # a blank line
        try:
            jobs.append(_job(row, len(header), f"job-{number}", pools, largest))
        except InvalidRequest as exc:
            raise ConfigError(
                f"{source}, line {number}: {exc.message}",
                hint=exc.hint or "fix that row (see docs/simulation.md for the format)",
                source=source,
                line=number,
            ) from None
    return Trace(path_name(source), tuple(hosts), sorted_jobs(jobs), None, {"format": "csv"})


def path_name(source: str) -> str:
    return Path(source).name


def _job(
    row: list[str],
    columns: int,
    job_id: str,
    pools: dict[str, PoolKey],
    largest: dict[PoolKey, int],
) -> Job:
    if len(row) != columns:
        raise InvalidRequest(f"expected {columns} columns, found {len(row)}")
    cells = [c.strip() for c in row] + [""] * (len(WITH_NODES) - columns)
    submit, duration, gpus, gpu_type, klass, interval, cost, nodes_text = cells
    pool = pools.get(gpu_type)
    if pool is None:
        known = ", ".join(sorted(k for k in pools if "/" not in k))
        raise InvalidRequest(f"no pool of GPU type {gpu_type!r} in the fleet", hint=f"use {known}")
    count = _whole(gpus, "gpus", minimum=1)
    if count > largest[pool]:
        raise InvalidRequest(f"{count} GPUs do not fit one host of {pool} ({largest[pool]} GPUs)")
    capacity_class = CapacityClass.parse(klass)
    if not interval and cost and not capacity_class.preemptible:
        raise InvalidRequest(
            "checkpoint_cost_s without checkpoint_interval_s (a save only at a notice) is for "
            "interruptible jobs: an on-demand job is never noticed"
        )
    nodes = _whole(nodes_text, "nodes", minimum=1) if nodes_text else 1
    if nodes > 1 and not capacity_class.preemptible:
        raise InvalidRequest(
            f"{nodes} nodes for an on-demand job: multi-node jobs are interruptible",
            hint="write interruptible in its class column, or leave nodes empty",
        )
    return Job(
        id=job_id,
        submit_s=_whole(submit, "submit_s", minimum=0),
        work_s=_whole(duration, "duration_s", minimum=1),
        gpus=count,
        pool=pool,
        capacity_class=capacity_class,
        checkpoint_interval_s=_whole(interval, "checkpoint_interval_s", minimum=1)
        if interval
        else None,
        checkpoint_cost_s=_whole(cost, "checkpoint_cost_s", minimum=0) if cost else 0,
        nodes=nodes,
    )


def _whole(text: str, column: str, *, minimum: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise InvalidRequest(f"{column} must be a whole number, got {text!r}") from None
    if value < minimum:
        raise InvalidRequest(f"{column} must be ≥ {minimum}, got {value}")
    return value
