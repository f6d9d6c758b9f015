"""What the plane's parts share: its configuration and the adapters every decision goes through.

The store, the runtime, the clock and the configuration change under a running plane: a
checkpoint report updates the scheduler's config, the loop turns `standby` on and off as the lead
moves, and tests swap a store or a runtime. So the parts of the plane (`app.plane` wires them)
read them from one `PlaneContext` at each use instead of keeping a copy: whatever is set on the
plane (`ControlPlane`'s properties set it here) is what every part sees at its next read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal

from lowcostgpu.app import billing
from lowcostgpu.core.nodes import DEFAULT_NAMING, NodeNaming
from lowcostgpu.core.retries import RetryPolicy
from lowcostgpu.core.scheduler import SchedulerConfig
from lowcostgpu.domain.capacity import Host
from lowcostgpu.domain.catalog import Catalog
from lowcostgpu.ports.clock import Clock
from lowcostgpu.ports.runtime import Runtime
from lowcostgpu.ports.store import Store

PLANE_LOGGER = "lowcostgpu.app.plane"
"""The logger of the plane and its parts: what they log reads as it did before the plane was
split into them (one logger for operators to filter on)."""


@dataclass(frozen=True, slots=True)
class PlaneConfig:
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    metering_interval_s: int = 60
    poll_interval_s: float = 1.0  # how often the loop looks at the runtime at the latest
    low_balance_usd: Decimal = billing.DEFAULT_LOW_BALANCE_USD  # `BalanceLow` below this
    effect_retry: RetryPolicy = field(default_factory=RetryPolicy)  # failed effects' backoff
    # Cluster nodes must be whole hosts (Slurm: a partition holds whole nodes); a cluster whose
    # gpus_per_node is no host size of its pool is refused at creation.
    whole_host_nodes: bool = False
    # The operator's option: a reclaim credits the work it destroyed since the instance's last
    # reported checkpoint (`core.credits`, written when the drained run ends: `app.billing`).
    credit_lost_work: bool = False
    # The label keys and taint the API shows on cluster nodes (Kubernetes: the operator's).
    node_naming: NodeNaming = DEFAULT_NAMING


@dataclass(slots=True)
class PlaneContext:
    """The plane's adapters and configuration, as they are now."""

    store: Store
    runtime: Runtime
    clock: Clock
    hosts: list[Host]
    catalog: Catalog
    config: PlaneConfig
    # A standby server (another holds the store's lead) decides nothing: two deciders on one
    # store could both place work on the same free GPUs, since versions guard instances,
    # not the fleet. The loop clears this once it holds the lead.
    standby: bool = False
