"""The names lowcostgpu writes on a cluster's Nodes, as settings an operator can choose.

Customers' tooling selects nodes by label, tolerates taints by key and alerts on Event reasons,
so these names are part of the product an operator sells: one that already sells capacity as
`together.ai/compute-class=preemptible` with `TogetherPreempted` events runs lowcostgpu with
`KubeNames(prefix="together.ai", preempted_reason="TogetherPreempted")` and its customers'
manifests keep working. Every label, annotation, taint and finalizer key derives from `prefix`.

The default reason is `NodePreempted`, not `Preempted`: kube-scheduler already posts `Preempted`
on pods it preempts for higher-priority pods, and alerts must be able to tell the two apart.
`reporting_instance` names this server in every Event (unique per server: two servers' events
about one node can be told apart in `kubectl get events -o wide`).
"""

from __future__ import annotations

import os
import re
import socket
from dataclasses import dataclass, field
from typing import Final

from lowcostgpu.core.nodes import NodeNaming, Taint
from lowcostgpu.domain.errors import ConfigError

DEFAULT_PREFIX: Final = "lowcostgpu.io"
DEFAULT_PREEMPTED_REASON: Final = "NodePreempted"
_PREFIX = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_REASON = re.compile(r"[A-Z][A-Za-z0-9]{0,127}")
_TAINT = re.compile(r"(?P<key>[^=:]+)(=(?P<value>[^:]*))?:(?P<effect>NoSchedule|NoExecute)")


def _default_instance() -> str:
    """This server: host and process, as the loop names its lead (`app.loop`)."""
    return f"{socket.gethostname()}:{os.getpid()}"[:128]


@dataclass(frozen=True, slots=True)
class KubeNames:
    """Label prefix, taints and Event reasons of one control plane (checked when made)."""

    prefix: str = DEFAULT_PREFIX
    preempted_reason: str = DEFAULT_PREEMPTED_REASON
    preemptible_taint: Taint | None = None  # None: `<prefix>/preemptible=true:NoSchedule`
    reporting_instance: str = field(default_factory=_default_instance)

    def __post_init__(self) -> None:
        if len(self.prefix) > 253 or not _PREFIX.fullmatch(self.prefix):
            raise ConfigError(
                f"the Kubernetes label prefix {self.prefix!r} is not a DNS subdomain",
                hint="use lower-case letters, digits, '-' and '.', e.g. lowcostgpu.io or "
                "together.ai",
            )
        if not _REASON.fullmatch(self.preempted_reason):
            raise ConfigError(
                f"the Event reason {self.preempted_reason!r} is not a CamelCase word",
                hint="e.g. NodePreempted or TogetherPreempted",
            )
        if self.preempted_reason == "Preempted":
            raise ConfigError(
                "the Event reason 'Preempted' is kube-scheduler's own, for pods it preempts",
                hint="choose another, e.g. NodePreempted",
            )

    def key(self, name: str) -> str:
        return f"{self.prefix}/{name}"

    @property
    def fleet_label(self) -> str:
        """On the operator's GPU Nodes: `<prefix>/fleet=<gpu type>` (set by the operator)."""
        return self.key("fleet")

    @property
    def cluster_label(self) -> str:
        return self.key("cluster")

    @property
    def compute_class_label(self) -> str:
        return self.key("compute-class")

    @property
    def plane_label(self) -> str:
        """Which control plane gave the host to a cluster (several may share an API server)."""
        return self.key("plane")

    @property
    def taint(self) -> Taint:
        """The preemptible nodes' taint: only pods that tolerate preemption land there."""
        return self.preemptible_taint or Taint(self.key("preemptible"), "true", "NoSchedule")

    @property
    def naming(self) -> NodeNaming:
        """The labels and taint as the API shows them on a cluster's nodes."""
        return NodeNaming(self.cluster_label, self.compute_class_label, self.taint)

    @property
    def draining_taint(self) -> Taint:
        """Added at T+0 of a drain, beside the cordon: tells why no pod is scheduled there."""
        return Taint(self.key("draining"), "", "NoSchedule")

    @property
    def ours(self) -> frozenset[str]:
        """The taint keys this plane adds and removes (never anyone else's)."""
        return frozenset({self.taint.key, self.draining_taint.key})

    @property
    def node_id(self) -> str:
        return self.key("node-id")

    @property
    def allocation_id(self) -> str:
        return self.key("allocation-id")

    @property
    def drain_deadline(self) -> str:
        return self.key("drain-deadline")  # Unix seconds

    @property
    def drain_reason(self) -> str:
        return self.key("drain-reason")

    @property
    def risk_label(self) -> str:
        """`next` on a preemptible cluster node among the next victims of on-demand reclaims
        (`core.effects.MarkNodeRisk`): what the cluster's own tooling can select on."""
        return self.key("preemption-risk")

    @property
    def risk_since(self) -> str:
        return self.key("preemption-risk-since")  # Unix seconds: when the node was warned

    @property
    def drain_finalizer(self) -> str:
        """On a Node while it drains: nobody deletes it from under the drain."""
        return self.key("drain")

    @property
    def controller(self) -> str:
        return self.key("node-provider")


DEFAULT_NAMES: Final = KubeNames(reporting_instance="lowcostgpu")


def parse_taint(text: str) -> Taint:
    """`KEY[=VALUE]:EFFECT` (as `kubectl taint` writes it) as a Taint, or a ConfigError."""
    match = _TAINT.fullmatch(text.strip())
    if match is None:
        raise ConfigError(
            f"cannot read the taint {text!r}",
            hint="write it as kubectl does: KEY=VALUE:NoSchedule (or KEY:NoSchedule)",
        )
    return Taint(match["key"], match["value"] or "", match["effect"])
