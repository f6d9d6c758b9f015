"""Clusters over HTTP: create, change the preemptible target, show, list, delete.

Mounted by `api.app.create_app` (it mounts `router` when this module exists). Every endpoint
takes the caller's account from its API key (`AccountId`); a cluster of another account answers
404, as if it did not exist. In-place class conversion answers 409 with the reason and what to
do instead.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field

from lowcostgpu.api.context import AccountId, ApiContext, Ctx
from lowcostgpu.api.models_input import MAX_INT64
from lowcostgpu.app.clusters import ClusterRequest, ClusterView
from lowcostgpu.core.nodes import NodeNaming, NodeState, node_labels, node_taints
from lowcostgpu.core.risk import RISK_NEXT

router = APIRouter(prefix="/v1/clusters", tags=["clusters"])
# No count is stored beyond a signed 64-bit integer (`MAX_INT64`); the plane bounds them further
# by the fleet (`core.cluster_engine.check_sizes`: what the cluster's pool could ever hold).


class ClusterIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    gpu: str = Field(description="GPU type of every node, e.g. a100-sxm4 (see the prices)")
    region: str | None = None
    gpus_per_node: int = Field(8, ge=1, le=64, description="GPUs of one node (at most a host)")
    standard_nodes: int = Field(
        1,
        le=MAX_INT64,
        description="nodes that are never preempted (at least 1: critical components; at most"
        " what the pool can hold)",
    )
    desired_preemptible_gpus: int = Field(
        0,
        le=MAX_INT64,
        description="the preemptible target, a multiple of gpus_per_node (at most what the pool"
        " can hold beside the standard nodes)",
    )
    grace_period_s: int = Field(300, ge=0, le=300, description="the nodes' drain, at most 300 s")


class TargetIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    desired_preemptible_gpus: int = Field(
        le=MAX_INT64, description="a multiple of the node size, at most what the pool can hold"
    )


class ConvertIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    compute_class: str = Field(description="standard or preemptible")


class TaintOut(BaseModel):
    key: str
    value: str
    effect: str


class NodeOut(BaseModel):
    id: str
    compute_class: str
    status: str
    gpus: int
    host_id: str | None
    gpu_indices: list[int]
    labels: dict[str, str]
    taints: list[TaintOut]
    started_at: int | None
    notice_at: int | None
    deadline: int | None
    drain_reason: str | None
    risk: str | None = Field(
        None, description='"next": among the next nodes an on-demand reclaim would drain (advice)'
    )
    risk_since: int | None = None

    @classmethod
    def of(cls, node: NodeState, naming: NodeNaming, risk_since: int | None = None) -> NodeOut:
        return cls(
            id=node.id,
            compute_class=node.capacity_class.compute_class_label,
            status=str(node.status),
            gpus=node.gpus,
            host_id=node.host_id,
            gpu_indices=list(node.gpu_indices),
            labels=node_labels(node, naming),
            taints=[
                TaintOut(key=t.key, value=t.value, effect=t.effect)
                for t in node_taints(node, naming)
            ],
            started_at=node.started_at,
            notice_at=node.notice_at,
            deadline=node.deadline,
            drain_reason=node.drain_reason,
            risk=None if risk_since is None else RISK_NEXT,
            risk_since=risk_since,
        )


class ClusterOut(BaseModel):
    id: str
    status: str
    gpu: str
    region: str
    gpus_per_node: int
    standard_nodes: int
    desired_preemptible_gpus: int
    allocated_preemptible_gpus: int
    pending_preemptible_gpus: int
    target_met: bool | None
    grace_period_s: int
    created_at: int
    nodes: list[NodeOut]

    @classmethod
    def of(cls, view: ClusterView, naming: NodeNaming) -> ClusterOut:
        c = view.cluster
        return cls(
            id=c.id,
            status=str(c.status),
            gpu=c.pool.gpu_type,
            region=c.pool.region,
            gpus_per_node=c.gpus_per_node,
            standard_nodes=c.spec.standard_nodes,
            desired_preemptible_gpus=c.desired_preemptible_gpus,
            allocated_preemptible_gpus=view.allocated_preemptible_gpus,
            pending_preemptible_gpus=view.pending_preemptible_gpus,
            target_met=c.target_met,
            grace_period_s=c.spec.grace_period_s,
            created_at=c.created_at,
            nodes=[
                NodeOut.of(n, naming, view.risk_since.get(n.id))
                for n in sorted(view.nodes, key=lambda n: n.id)
            ],
        )


def _naming(ctx: ApiContext) -> NodeNaming:
    """The node labels and taint this server's runtime writes (Kubernetes: the operator's)."""
    return ctx.plane.config.node_naming


@router.post("", status_code=201)
def create_cluster(body: ClusterIn, ctx: Ctx, account_id: AccountId) -> ClusterOut:
    request = ClusterRequest(
        account_id=account_id,
        gpu_type=body.gpu,
        gpus_per_node=body.gpus_per_node,
        standard_nodes=body.standard_nodes,
        desired_preemptible_gpus=body.desired_preemptible_gpus,
        region=body.region,
        grace_period_s=body.grace_period_s,
    )
    return ClusterOut.of(ctx.plane.clusters.create_cluster(request), _naming(ctx))


@router.get("")
def list_clusters(
    ctx: Ctx,
    account_id: AccountId,
    id_prefix: Annotated[
        str | None, Query(max_length=64, description="only ids starting with this")
    ] = None,
) -> list[ClusterOut]:
    """The caller's clusters; `id_prefix` is what the CLI resolves a short id (`c-3f`) by.
    O(the account's clusters and their nodes): an account has few clusters."""
    views = ctx.plane.clusters.list_clusters(account_id)
    return [
        ClusterOut.of(v, _naming(ctx)) for v in views if v.cluster.id.startswith(id_prefix or "")
    ]


@router.get("/{cluster_id}")
def get_cluster(cluster_id: str, ctx: Ctx, account_id: AccountId) -> ClusterOut:
    return ClusterOut.of(ctx.plane.clusters.get_cluster(cluster_id, account_id), _naming(ctx))


@router.patch("/{cluster_id}")
def update_target(cluster_id: str, body: TargetIn, ctx: Ctx, account_id: AccountId) -> ClusterOut:
    view = ctx.plane.clusters.update_cluster_target(
        cluster_id, body.desired_preemptible_gpus, account_id
    )
    return ClusterOut.of(view, _naming(ctx))


@router.delete("/{cluster_id}")
def delete_cluster(cluster_id: str, ctx: Ctx, account_id: AccountId) -> ClusterOut:
    return ClusterOut.of(ctx.plane.clusters.delete_cluster(cluster_id, account_id), _naming(ctx))


@router.post(
    "/{cluster_id}/nodes/{node_id}/convert",
    responses={409: {"description": "always: nodes cannot change class in place"}},
)
def convert_node(
    cluster_id: str, node_id: str, body: ConvertIn, ctx: Ctx, account_id: AccountId
) -> None:
    ctx.plane.clusters.convert_node(cluster_id, node_id, body.compute_class, account_id)
