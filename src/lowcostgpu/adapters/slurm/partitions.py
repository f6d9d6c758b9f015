"""What a cluster node's record means in slurmctld: its partition, its feature and its drain.

A record (`node_records`) says what the provider made true; these functions turn it into
`scontrol` commands (and name what they make: partitions `lcg-<cluster id>[-preemptible]`, the
`preemptible` feature, a drain's Reason). They are apart from the provider (`nodes.SlurmNodes`)
because they are the whole of what it writes to slurmctld's configuration, and `make_true` is
run again after every `scontrol reconfigure` (which drops partitions and features made at run
time), so that part reads alone. They hold no state: each is handed the `Slurm` it speaks to.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import UTC, datetime

from lowcostgpu.adapters.slurm.cli import NodeInfo, Slurm
from lowcostgpu.adapters.slurm.node_records import Drain, NodeRecord, members
from lowcostgpu.adapters.slurm.node_risk import set_risk_comment
from lowcostgpu.domain.errors import InvalidRequest

NODES_LOGGER = "lowcostgpu.adapters.slurm.nodes"  # the provider's, for all its parts (as before)
log = logging.getLogger(NODES_LOGGER)
FEATURE = "preemptible"
REASON_PREFIX = "lowcostgpu:"


def partition_name(cluster_id: str, preemptible: bool) -> str:
    return f"lcg-{cluster_id}-preemptible" if preemptible else f"lcg-{cluster_id}"


def cluster_partitions(cluster_id: str) -> tuple[str, str]:
    return partition_name(cluster_id, False), partition_name(cluster_id, True)


def drain_reason(drain: Drain) -> str:
    """The node's Reason in `sinfo -R`: why and until when (UTC)."""
    deadline = datetime.fromtimestamp(drain.deadline, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"{REASON_PREFIX} {drain.reason}, deadline={deadline}"


def make_true(slurm: Slurm, records: list[NodeRecord], infos: Mapping[str, NodeInfo]) -> None:
    """Partitions, features and drains as the records say (a reconfigure drops them)."""
    for partition in sorted({r.partition for r in records}):
        want = members(records, partition)
        have = sorted(n for n, info in infos.items() if partition in info.partitions)
        if want != have:
            set_members(slurm, partition, want)
    for r in records:
        info = infos.get(r.host)
        if info is None:
            log.warning("node %s: host %s is not in the Slurm cluster", r.node_id, r.host)
            continue
        if r.preemptible and FEATURE not in info.features:
            set_feature(slurm, r.host, add=True)
        if r.drain is not None and "drain" not in info.state.lower():
            drain_host(slurm, r)


def set_members(slurm: Slurm, partition: str, hosts: list[str]) -> None:
    fields = {"PartitionName": partition, "Nodes": ",".join(hosts)}
    try:
        slurm.update("PartitionName", fields, what=f"setting the nodes of {partition}")
    except InvalidRequest as exc:
        if "invalid partition name" not in str(exc).lower():
            raise
        slurm.create_partition(partition, hosts)


def set_feature(slurm: Slurm, host: str, *, add: bool) -> None:
    """Add or drop `preemptible`, keeping the node's other features."""
    fields = slurm.node_fields(host)
    update = {"NodeName": host}
    for key in ("AvailableFeatures", "ActiveFeatures"):
        have = [f for f in fields.get(key, "").split(",") if f and f != "(null)"]
        kept = [f for f in have if f != FEATURE]
        update[key] = ",".join([*kept, FEATURE] if add else kept)
    verb = "marking" if add else "unmarking"
    slurm.update("NodeName", update, what=f"{verb} Slurm node {host} {FEATURE}")


def drain_host(slurm: Slurm, record: NodeRecord) -> None:
    assert record.drain is not None
    fields = {"NodeName": record.host, "State": "DRAIN", "Reason": drain_reason(record.drain)}
    slurm.update("NodeName", fields, what=f"draining Slurm node {record.host}")
    set_risk_comment(slurm, record.host, "", 0)  # the notice replaces the advice


def check_whole_host(node_id: str, host: NodeInfo, gpus: int) -> None:
    """A cluster node on Slurm is a whole Slurm node: a partition holds hosts, not GPUs."""
    if gpus != host.gpus:
        raise InvalidRequest(
            f"node {node_id} would take {gpus} of the {host.gpus} GPUs of Slurm node "
            f"{host.name}: on Slurm a cluster node is a whole host",
            hint=f"make the cluster's gpus_per_node {host.gpus}, the GPUs of each host of this "
            "pool (delete this cluster and create it again)",
        )
