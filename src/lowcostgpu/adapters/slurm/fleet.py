"""The fleet of `--runtime slurm`, as Slurm sees it: the nodes of lowcostgpu's partition.

The fleet file says which hosts lowcostgpu places work on and how many GPUs each has; on Slurm a
run is `sbatch -w HOST --gres=gpu:N`, so a fleet that disagrees with the partition would be a
job that pends forever (a host that is not a node of it, more GPUs than the node has) or GPUs
that are never used. `check_fleet` refuses any disagreement at start, naming each one:

- a host of the fleet that is not a node of the partition: an error;
- a host whose GPU count differs from the node's gres: an error (fewer would leave GPUs idle
  that the site gave lowcostgpu, more would pend);
- a host whose GPU type differs from the one the node names (its gres type, or a node feature
  that is a GPU type of the catalog): an error; a node that names none is taken as it is;
- a node of the partition the fleet leaves out: a warning, not an error. lowcostgpu places work
  only on the hosts it was given (`-w`), so such a node only stays unused: a site may keep one
  out on purpose (maintenance, a node in the partition of cluster nodes too).

`fleet_from_slurm` builds the fleet from the partition instead (`--fleet-from-slurm`).

Cost: one `scontrol ping`, one `scontrol show partition` and one `sinfo` of the partition, each
O(nodes of the partition); done once at start.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from lowcostgpu.adapters.slurm.cli import Slurm, gpus_of_gres
from lowcostgpu.domain.capacity import Host, PoolKey
from lowcostgpu.domain.catalog import Catalog
from lowcostgpu.domain.errors import ConfigError, InvalidRequest
from lowcostgpu.domain.fleet import HOST_NAME, REGION_NAME, listed

SINFO_FORMAT = "%N|%G|%T|%f|%o"
_PREEMPTING = ("REQUEUE", "CANCEL", "SUSPEND")
_UNUSABLE = ("down", "drain", "fail", "inval", "unknown", "not_responding", "power")


@dataclass(frozen=True, slots=True)
class PartitionNode:
    """One node of the partition: its name, GPUs, the GPU types it names, state and address."""

    name: str
    gpus: int
    gres_types: tuple[str, ...]  # `gpu:a100-sxm4:8` names a100-sxm4
    features: tuple[str, ...]
    state: str
    address: str

    def gpu_type(self, catalog: Catalog) -> str | None:
        """The catalog GPU type this node names (gres type first, then a feature), if any."""
        for name in (*self.gres_types, *self.features):
            if name in catalog.gpu_types:
                return name
        return None

    @property
    def usable(self) -> bool:
        state = self.state.lower().rstrip("*~#!%$@^-+")
        return not any(word in state for word in _UNUSABLE)

    @property
    def on_loopback(self) -> bool:
        """The node's slurmd runs on this machine (a lab): it sees this machine's mounts."""
        if self.address == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.address).is_loopback
        except ValueError:
            return False


def parse_sinfo(text: str) -> list[PartitionNode]:
    """`sinfo -h -N -p PARTITION -o SINFO_FORMAT`: one node a line (a node in the partition once,
    even if it is listed again for another state)."""
    found: dict[str, PartitionNode] = {}
    for line in text.splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) != 5 or not parts[0] or parts[0] in found:
            continue
        name, gres, state, features, address = parts
        found[name] = PartitionNode(
            name=name,
            gpus=gpus_of_gres(gres),
            gres_types=_gres_types(gres),
            features=tuple(f for f in features.split(",") if f and f != "(null)"),
            state=state,
            address=address,
        )
    return [found[name] for name in sorted(found)]


def _gres_types(gres: str) -> tuple[str, ...]:
    """The GPU types of a gres string: `gpu:a100:4(S:0-1),gpu:h100:2` names a100 and h100."""
    types = []
    for item in gres.split(","):
        parts = item.split("(")[0].split(":")
        if parts[0] == "gpu" and len(parts) == 3 and parts[1]:
            types.append(parts[1])
    return tuple(types)


def check_cluster(slurm: Slurm, partition: str) -> None:
    """slurmctld answers, and `partition` exists with Slurm's own preemption off — a clear error
    otherwise, before the control plane writes anything."""
    try:
        slurm.run(["scontrol", "ping"], what="checking that slurmctld answers")
    except InvalidRequest as exc:  # exit 1: a banner of '*' when DOWN, else Slurm's complaint
        said = exc.message.rpartition("Slurm refused it: ")[2]
        if said.strip("*") and "down" not in said.lower():
            raise ConfigError(
                f"{slurm.where} cannot be used: {said}",
                hint="check --slurm-conf (`SLURM_CONF=FILE scontrol ping` shows what is wrong)",
            ) from None
        raise ConfigError(
            f"slurmctld of {slurm.where} is down: `scontrol ping` cannot reach it",
            hint="start slurmctld, or point --slurm-conf (or SLURM_CONF) at the right cluster",
        ) from None
    try:
        out = slurm.run(
            ["scontrol", "show", "partition", "-o", partition],
            what=f"reading partition {partition}",
        )
    except InvalidRequest:
        raise ConfigError(
            f"{slurm.where} has no partition {partition!r}",
            hint=f"give --partition one of: {', '.join(partitions(slurm)) or '(none)'}; or add "
            "one for lowcostgpu (docs/slurm.md)",
        ) from None
    mode = _field(out, "PreemptMode")
    if any(word in mode.upper() for word in _PREEMPTING):
        raise ConfigError(
            f"partition {partition!r} has Slurm's own preemption on (PreemptMode={mode}): "
            "Slurm would requeue or cancel lowcostgpu's jobs behind its back",
            hint=f"set PreemptMode=OFF on PartitionName={partition} in slurm.conf and run "
            "`scontrol reconfigure` (docs/slurm.md)",
        )


def partitions(slurm: Slurm) -> list[str]:
    """The cluster's partition names (for the hint of an unknown one)."""
    out = slurm.run(["sinfo", "-h", "-o", "%R"], what="listing the Slurm partitions")
    return sorted({line.strip() for line in out.splitlines() if line.strip()})


def partition_nodes(slurm: Slurm, partition: str) -> list[PartitionNode]:
    """The nodes of `partition` (one `sinfo` call)."""
    out = slurm.run(
        ["sinfo", "-h", "-N", "-p", partition, "-o", SINFO_FORMAT],
        what=f"listing the nodes of partition {partition}",
    )
    return parse_sinfo(out)


def check_fleet(
    hosts: Sequence[Host], nodes: Sequence[PartitionNode], partition: str, catalog: Catalog
) -> list[str]:
    """Refuse a fleet that disagrees with the partition's nodes (the module docstring says
    what is an error); the warnings (nodes the fleet leaves out, unusable nodes)."""
    by_name = {n.name: n for n in nodes}
    problems: list[str] = []
    for host in hosts:
        node = by_name.get(host.id)
        if node is None:
            problems.append(f"host {host.id} is not a node of the partition")
            continue
        if node.gpus != host.gpu_count:
            problems.append(
                f"host {host.id}: the fleet says {host.gpu_count} GPUs, Slurm {node.gpus} "
                f"(its gres)"
            )
        named = node.gpu_type(catalog)
        if named is not None and named != host.pool.gpu_type:
            problems.append(
                f"host {host.id}: the fleet says GPU type {host.pool.gpu_type}, Slurm {named}"
            )
    if problems:
        raise ConfigError(
            f"the fleet disagrees with Slurm partition {partition!r} "
            f"(nodes: {_names(by_name)}): {listed(problems)}",
            hint="fix the fleet file to match `sinfo -N -p "
            f"{partition} -o %N,%G,%f`, or take the fleet from Slurm with --fleet-from-slurm",
        )
    return _warnings(hosts, nodes, partition)


def _warnings(hosts: Sequence[Host], nodes: Sequence[PartitionNode], partition: str) -> list[str]:
    in_fleet = {h.id for h in hosts}
    left_out = [n.name for n in nodes if n.name not in in_fleet]
    warnings = []
    if left_out:
        warnings.append(
            f"the fleet leaves out {len(left_out)} node(s) of partition {partition!r}: "
            f"{listed(left_out)}; lowcostgpu places no work there"
        )
    unusable = [f"{n.name} ({n.state})" for n in nodes if n.name in in_fleet and not n.usable]
    if unusable:
        warnings.append(
            f"node(s) of the fleet that Slurm cannot use now: {listed(unusable)}; their work "
            "waits until Slurm brings them back"
        )
    return warnings


def fleet_from_slurm(
    nodes: Iterable[PartitionNode],
    catalog: Catalog,
    *,
    region: str,
    partition: str,
    gpu_type: str | None = None,
) -> list[Host]:
    """The fleet of the partition: every node with a GPU, in `region`; its GPU type from its
    gres type or a feature naming a catalog type, else `gpu_type`."""
    if not REGION_NAME.match(region):
        raise ConfigError(
            f"region name {region!r} is not valid",
            hint="use lower-case letters, digits and dashes, e.g. --region eu-west",
        )
    if gpu_type is not None and gpu_type not in catalog.gpu_types:
        raise ConfigError(
            f"unknown GPU type {gpu_type!r}",
            hint=f"use one of the catalog's GPU types: {', '.join(sorted(catalog.gpu_types))}",
        )
    hosts, untyped, skipped = [], [], []
    for node in nodes:
        if node.gpus < 1:
            continue
        if not HOST_NAME.match(node.name):
            skipped.append(node.name)
            continue
        kind = node.gpu_type(catalog) or gpu_type
        if kind is None:
            untyped.append(node.name)
            continue
        hosts.append(Host(id=node.name, pool=PoolKey(region, kind), gpu_count=node.gpus))
    if untyped:
        raise ConfigError(
            f"Slurm does not say the GPU type of node(s) {listed(untyped)} of partition "
            f"{partition!r}",
            hint="name it in gres.conf (Type=a100-sxm4) or as a node feature, or give "
            "--slurm-gpu-type TYPE (or a fleet file with --fleet)",
        )
    if skipped:
        raise ConfigError(
            f"node name(s) {listed(skipped)} cannot be host ids of lowcostgpu",
            hint="use a fleet file (--fleet) that lists the nodes to use",
        )
    if not hosts:
        raise ConfigError(
            f"partition {partition!r} has no node with a GPU (gres gpu)",
            hint="give its nodes Gres=gpu:N in slurm.conf and gres.conf (docs/slurm.md)",
        )
    return hosts


def _field(text: str, key: str) -> str:
    for token in text.split():
        name, _, value = token.partition("=")
        if name == key:
            return value
    return ""


def _names(by_name: dict[str, PartitionNode]) -> str:
    return listed(sorted(by_name)) if by_name else "none"
