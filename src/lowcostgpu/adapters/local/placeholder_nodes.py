"""Cluster nodes on the local runtime: a placeholder workload per node (a `NodeProvider`).

Until a node provider exists for the runtime, a node is represented by a placeholder workload on
its allocation (`PLACEHOLDER_ARGV`, a `sleep` that SIGTERM ends), so the drain is real: SIGTERM
at T+0, the node removed when the placeholder exits, SIGKILL at the deadline. `CordonNode` and
`RemoveNode` are only logged: the outbox records them as done. On Kubernetes nodes are Node
objects instead (`adapters.kubernetes.KubernetesNodes`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from lowcostgpu.ports.runtime import Runtime, WorkloadStart
from lowcostgpu.ports.store_records import OutboxEntry

log = logging.getLogger(__name__)
PLACEHOLDER_ARGV = ("sleep", "infinity")


class PlaceholderNodes:
    """Carries out node effects by a placeholder workload per node (see the module docstring)."""

    def __init__(self, argv: Sequence[str] = PLACEHOLDER_ARGV) -> None:
        self.argv = tuple(argv)

    def carry_out(self, entry: OutboxEntry, runtime: Runtime) -> None:
        p = entry.payload
        if entry.kind != "AddNode":
            log.info("%s %s recorded (no node provider on this runtime)", entry.kind, p)
            return
        node_id = str(p["node_id"])
        runtime.start(
            WorkloadStart(
                instance_id=node_id,
                allocation_id=str(p["allocation_id"]),
                host_id=str(p["host_id"]),
                gpu_indices=tuple(int(i) for i in p["gpu_indices"]),
                restart_count=0,
                argv=self.argv,
                env={
                    "LOWCOSTGPU_NODE_ID": node_id,
                    "LOWCOSTGPU_CLUSTER_ID": str(p["cluster_id"]),
                    "LOWCOSTGPU_COMPUTE_CLASS": str(p["compute_class"]),
                },
            )
        )
