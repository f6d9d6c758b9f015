"""`cluster create|update|show|ls|rm|convert`: clusters with a preemptible target, over the API."""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer

from lowcostgpu.cli import format as fmt
from lowcostgpu.cli.context import (
    JsonCommand,
    JsonFields,
    client,
    cluster_id,
    complete_cluster_ids,
    complete_gpu_types,
    examples,
    handled,
    print_json,
    width,
)
from lowcostgpu.client.clusters import ClusterApi

cluster_app = typer.Typer(
    help="Clusters: standard nodes (never preempted) and a preemptible target that refills.",
    no_args_is_help=True,
)
ClusterId = Annotated[
    str,
    typer.Argument(
        help="a cluster id, or a unique start of one (c-3f, 3f)",
        autocompletion=complete_cluster_ids,
        show_default=False,
    ),
]


@cluster_app.command(
    "create",
    cls=JsonCommand,
    epilog=examples(
        "lowcostgpu cluster create --gpu a100-sxm4 --gpus-per-node 8 --preemptible-gpus 16",
        "lowcostgpu cluster create --gpu a100-sxm4 --json id,status",
    ),
)
def create(
    gpu: Annotated[
        str,
        typer.Option(
            help="GPU type of every node, e.g. a100-sxm4", autocompletion=complete_gpu_types
        ),
    ],
    preemptible_gpus: Annotated[
        int, typer.Option(help="desired_preemptible_gpus: a multiple of --gpus-per-node")
    ] = 0,
    standard_nodes: Annotated[int, typer.Option(help="never-preempted nodes (at least 1)")] = 1,
    gpus_per_node: Annotated[int, typer.Option(help="GPUs of one node")] = 8,
    region: Annotated[str | None, typer.Option(help="region (default: the first with it)")] = None,
    as_json: JsonFields = None,
) -> None:
    """Create a cluster; its standard nodes are placed at once or the request is refused."""
    body: dict[str, Any] = {
        "gpu": gpu,
        "gpus_per_node": gpus_per_node,
        "standard_nodes": standard_nodes,
        "desired_preemptible_gpus": preemptible_gpus,
    }
    if region:
        body["region"] = region
    with handled(), client() as api:
        found = ClusterApi(api).create(**body)
    _show(found, as_json)


@cluster_app.command(
    "update",
    cls=JsonCommand,
    epilog=examples("lowcostgpu cluster update c-3f --preemptible-gpus 32"),
)
def update(
    cluster: ClusterId,
    preemptible_gpus: Annotated[int, typer.Option(help="the new desired_preemptible_gpus")],
    as_json: JsonFields = None,
) -> None:
    """Change the preemptible target; the cluster grows or drains toward it."""
    with handled(), client() as api:
        found = ClusterApi(api).update_target(cluster_id(api, cluster), preemptible_gpus)
    _show(found, as_json)


@cluster_app.command(
    "show",
    cls=JsonCommand,
    epilog=examples("lowcostgpu cluster show c-3f", "lowcostgpu cluster show 3f --json nodes"),
)
def show(cluster: ClusterId, as_json: JsonFields = None) -> None:
    """Desired vs allocated preemptible GPUs, and every node with its compute-class label."""
    with handled(), client() as api:
        found = ClusterApi(api).get(cluster_id(api, cluster))
    _show(found, as_json)


@cluster_app.command(
    "ls",
    cls=JsonCommand,
    epilog=examples("lowcostgpu cluster ls", "lowcostgpu cluster ls --json id,status"),
)
def ls(as_json: JsonFields = None) -> None:
    """Your clusters."""
    with handled(), client() as api:
        found = ClusterApi(api).list()
    if as_json:
        print_json(found, as_json)
        return
    if not found:
        typer.echo("no clusters (create one: lowcostgpu cluster create --gpu a100-sxm4)")
        return
    for line in fmt.fitted(CLUSTER_COLUMNS, [cluster_row(c, time.time()) for c in found], width()):
        typer.echo(line)


CLUSTER_COLUMNS = (
    fmt.Column("ID", 0),
    fmt.Column("STATUS", 0),
    fmt.Column("GPU", 1),
    fmt.Column("PREEMPTIBLE GPUS", 2, right=True),
    fmt.Column("STANDARD NODES", 3, right=True),
    fmt.Column("AGE", 4),
    fmt.Column("REGION", 5),
)


def cluster_row(c: dict[str, Any], now_s: float) -> list[str]:
    """One cluster as `cluster ls` shows it: preemptible GPUs as allocated/desired."""
    return [
        c["id"],
        c["status"],
        c["gpu"],
        f"{c['allocated_preemptible_gpus']}/{c['desired_preemptible_gpus']}",
        str(c["standard_nodes"]),
        fmt.ago(c.get("created_at"), now_s),
        c["region"],
    ]


@cluster_app.command("rm", cls=JsonCommand, epilog=examples("lowcostgpu cluster rm c-3f"))
def rm(cluster: ClusterId, as_json: JsonFields = None) -> None:
    """Delete a cluster: every node drains with its grace period, then it is gone."""
    with handled(), client() as api:
        found = ClusterApi(api).delete(cluster_id(api, cluster))
    _show(found, as_json)


@cluster_app.command(
    "convert",
    cls=JsonCommand,
    epilog=examples("lowcostgpu cluster convert c-3f n-5e6f7a8b standard   # refused, says why"),
)
def convert(cluster: ClusterId, node_id: str, compute_class: str) -> None:
    """Convert a node's class in place — always refused, with what to do instead."""
    with handled(), client() as api:
        ClusterApi(api).convert_node(cluster_id(api, cluster), node_id, compute_class)


def _show(c: dict[str, Any], as_json: str | None) -> None:
    if as_json:
        print_json(c, as_json)
        return
    met = {True: "met", False: "unmet", None: "-"}[c["target_met"]]
    typer.echo(
        f"cluster {c['id']} · {c['status']} · {c['gpu']} in {c['region']} · "
        f"{c['gpus_per_node']} GPUs per node · preemptible "
        f"{c['allocated_preemptible_gpus']}/{c['desired_preemptible_gpus']} GPUs ({met})"
    )
    rows = []
    for n in c["nodes"]:
        taints = ", ".join(f"{t['key']}={t['value']}:{t['effect']}" for t in n["taints"])
        rows.append(
            [
                n["id"],
                n["labels"].get("lowcostgpu.io/compute-class", n["compute_class"]),
                n["status"] + (" · at risk" if n.get("risk") else ""),
                str(n["gpus"]),
                n["host_id"] or fmt.NONE,
                taints or fmt.NONE,
            ]
        )
    for line in fmt.fitted(NODE_COLUMNS, rows, width()):
        typer.echo(line)


NODE_COLUMNS = (
    fmt.Column("NODE", 0),
    fmt.Column("COMPUTE-CLASS", 0),
    fmt.Column("STATUS", 0),
    fmt.Column("GPUS", 1, right=True),
    fmt.Column("HOST", 2),
    fmt.Column("TAINTS", 3),
)


def register(app: typer.Typer) -> None:
    app.add_typer(cluster_app, name="cluster")
