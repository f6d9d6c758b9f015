"""Entry point of the `lowcostgpu` command."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer

from lowcostgpu.cli.context import examples
from lowcostgpu.domain.errors import LowcostgpuError

app = typer.Typer(
    help="lowcostgpu: preemptible GPU compute at a fixed half price, on a fleet you own.",
    no_args_is_help=True,
)


@app.callback()
def main() -> None:
    """lowcostgpu: preemptible GPU compute at a fixed half price, on a fleet you own."""


@app.command(epilog=examples("lowcostgpu version"))
def version() -> None:
    """Print the version."""
    from lowcostgpu import __version__

    typer.echo(__version__)


@app.command(
    epilog=examples(
        "lowcostgpu demo",
        "lowcostgpu demo --simulated",
        "lowcostgpu demo --runtime slurm --slurm-conf /etc/slurm/slurm.conf",
    )
)
def demo(
    simulated: Annotated[
        bool, typer.Option(help="play it on a virtual clock in a second, no processes")
    ] = False,
    fleet: Annotated[
        Path | None, typer.Option(help="--simulated: fleet TOML file (default: the demo fleet)")
    ] = None,
    keep: Annotated[bool, typer.Option(help="keep the throw-away data directory")] = False,
    runtime: Annotated[
        str, typer.Option(help="local (processes here) or slurm (jobs of a Slurm cluster)")
    ] = "local",
    slurm_conf: Annotated[
        Path | None,
        typer.Option(
            help="slurm: the cluster's slurm.conf (default: $SLURM_CONF; without either, a "
            "throw-away cluster on this machine when it can make one)"
        ),
    ] = None,
    partition: Annotated[str, typer.Option(help="slurm: the partition to run in")] = "lowcostgpu",
    slurm_shared_dir: Annotated[
        Path | None,
        typer.Option(help="slurm: a directory every node mounts (default: a temporary one here)"),
    ] = None,
) -> None:
    """The seed session for real: a throw-away server, a real training run reclaimed by
    on-demand work, checkpoint, requeue, resume from the same step, and the bill (~2 min)."""
    with _clear_errors():
        if simulated:
            from lowcostgpu.bootstrap.demo import run_demo

            run_demo(typer.echo, fleet)
            return
        from lowcostgpu.cli.demo_live import SlurmDemo, run_live_demo

        slurm = None
        if runtime != "local":
            slurm = SlurmDemo.of(runtime, slurm_conf, partition, slurm_shared_dir)
        run_live_demo(typer.echo, keep=keep, slurm=slurm)


MAX_WEBHOOK_BACKOFF_S = 3600.0


def _backoff_s(value: float) -> float:
    """A first retry delay of 0 or less would retry a failing endpoint in a busy loop."""
    if not 0 < value <= MAX_WEBHOOK_BACKOFF_S:  # NaN fails this too
        raise typer.BadParameter(
            f"{value} is not a delay: give seconds > 0 and at most {MAX_WEBHOOK_BACKOFF_S:.0f}"
        )
    return value


@app.command(
    epilog=examples(
        "lowcostgpu serve",
        "lowcostgpu serve --db postgresql://lcg@db/lcg --port 8080 --fleet fleet.toml",
        "lowcostgpu serve --runtime kubernetes --kubeconfig ~/.kube/config --image IMAGE",
        "lowcostgpu serve --runtime slurm --slurm-conf /etc/slurm/slurm.conf --fleet-from-slurm "
        "--slurm-shared-dir /shared/lowcostgpu",
    )
)
def serve(
    data_dir: Annotated[Path, typer.Option(help="where the store, logs and volumes live")] = Path(
        "./data"
    ),
    db: Annotated[
        str | None,
        typer.Option(help="store URL: sqlite:///FILE (default, in --data-dir) or postgresql://…"),
    ] = None,
    fleet: Annotated[
        Path | None, typer.Option(help="fleet TOML file (default: the demo fleet)")
    ] = None,
    catalog: Annotated[
        Path | None, typer.Option(help="GPU catalog TOML file (default: the shipped one)")
    ] = None,
    host: Annotated[str, typer.Option(help="address to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port to listen on", min=1, max=65535)] = 8080,
    metering_interval_s: Annotated[int, typer.Option(help="60 to 120")] = 60,
    admin_key: Annotated[
        str | None,
        typer.Option(
            envvar="LOWCOSTGPU_ADMIN_KEY",
            help="admin key to accept (stored hashed); default: one is made at the first start",
        ),
    ] = None,
    allow_private_webhooks: Annotated[
        bool, typer.Option(help="let webhooks call loopback/private addresses (labs, tests)")
    ] = False,
    webhook_backoff_s: Annotated[
        float,
        typer.Option(
            help="first webhook retry delay (> 0, at most 3600); it doubles up to an hour",
            callback=_backoff_s,
        ),
    ] = 30.0,
    runtime: Annotated[
        str,
        typer.Option(help="local (processes here), kubernetes (pods and Nodes) or slurm (jobs)"),
    ] = "local",
    kubeconfig: Annotated[
        Path | None, typer.Option(help="kubernetes: kubeconfig file (default: $KUBECONFIG)")
    ] = None,
    kube_region: Annotated[
        list[str] | None,
        typer.Option(
            metavar="REGION=KUBECONFIG",
            help="kubernetes: REGION=KUBECONFIG, once per region: one control plane over "
            "several clusters, each pool in its region's (instead of --kubeconfig)",
        ),
    ] = None,
    in_cluster: Annotated[
        bool,
        typer.Option(
            "--in-cluster",
            help="kubernetes: drive the cluster this pod runs in, as its ServiceAccount "
            "(deploy/kubernetes; instead of --kubeconfig)",
        ),
    ] = False,
    namespace: Annotated[
        str, typer.Option(help="kubernetes: namespace of instance pods and volume claims")
    ] = "default",
    image: Annotated[
        str | None, typer.Option(help="kubernetes: container image of workloads")
    ] = None,
    fleet_from_kubernetes: Annotated[
        bool,
        typer.Option(
            help="kubernetes: the fleet is the Nodes labelled <prefix>/fleet=<gpu type> (no "
            "--fleet; their region is --region)"
        ),
    ] = False,
    kube_label_prefix: Annotated[
        str, typer.Option(help="kubernetes: prefix of the labels, taints and annotations on Nodes")
    ] = "lowcostgpu.io",
    kube_preemptible_taint: Annotated[
        str | None,
        typer.Option(
            help="kubernetes: the preemptible nodes' taint, KEY=VALUE:NoSchedule (default "
            "<prefix>/preemptible=true:NoSchedule)"
        ),
    ] = None,
    kube_event_reason: Annotated[
        str, typer.Option(help="kubernetes: reason of the Warning Event at a node's reclaim")
    ] = "NodePreempted",
    kube_storage_class: Annotated[
        str | None, typer.Option(help="kubernetes: storage class of volume claims")
    ] = None,
    kube_volume_access: Annotated[
        str,
        typer.Option(
            help="kubernetes: access mode of new volume claims: ReadWriteOnce, or ReadWriteMany "
            "so that a multi-node instance's members mount its volume on several nodes"
        ),
    ] = "ReadWriteOnce",
    slurm_conf: Annotated[
        Path | None,
        typer.Option(help="slurm: the cluster's slurm.conf (default: $SLURM_CONF, else Slurm's)"),
    ] = None,
    partition: Annotated[
        str, typer.Option(help="slurm: the partition lowcostgpu runs jobs in (PreemptMode=OFF)")
    ] = "lowcostgpu",
    slurm_shared_dir: Annotated[
        Path | None,
        typer.Option(
            help="slurm: runs' records and volumes, on a filesystem every node mounts at the "
            "same path (default: DATA_DIR/slurm)"
        ),
    ] = None,
    fleet_from_slurm: Annotated[
        bool, typer.Option(help="slurm: the fleet is the partition's GPU nodes (no --fleet)")
    ] = False,
    region: Annotated[
        str,
        typer.Option(
            help="--fleet-from-slurm/--fleet-from-kubernetes: the region of the cluster's hosts"
        ),
    ] = "slurm",
    slurm_gpu_type: Annotated[
        str | None,
        typer.Option(
            help="slurm, --fleet-from-slurm: GPU type of nodes whose gres type and features "
            "name none"
        ),
    ] = None,
    victim_policy: Annotated[
        str,
        typer.Option(
            help="which preemptible work a reclaim takes: fair-least-work-lost (default), "
            "least-work-lost, youngest-first, lowest-priority, random"
        ),
    ] = "fair-least-work-lost",
    min_runtime_s: Annotated[
        int,
        typer.Option(
            help="a (re)started preemptible run is not reclaimed before this long (after an "
            "interruption: never; a first run: only if nothing else frees the GPUs)"
        ),
    ] = 300,
    on_demand_hold_s: Annotated[
        int,
        typer.Option(
            help="after an on-demand refusal, hold freed GPUs this long (0: off — then the "
            "default victim policy loses far more work: docs/scheduling.md)"
        ),
    ] = 120,
    credit_lost_work: Annotated[
        bool,
        typer.Option(
            "--credit-lost-work",
            help="credit customers, on their bill, the GPU-time a reclaim destroyed since their "
            "last reported checkpoint (docs/billing.md); off by default",
        ),
    ] = False,
    no_sandbox: Annotated[
        bool,
        typer.Option(
            "--no-sandbox",
            help="run local workloads unconfined, as the server's user (machines without "
            "bubblewrap; never with untrusted customers: docs/security.md)",
        ),
    ] = False,
) -> None:
    """Run the control plane: store, reconcile loop, runtime (local, Kubernetes or Slurm), API."""
    from lowcostgpu.api.server import serve as run_server
    from lowcostgpu.app.webhooks import WebhookPolicy
    from lowcostgpu.bootstrap.serve import ServeOptions

    options = ServeOptions(
        data_dir, db, fleet, catalog, host, port, metering_interval_s, admin_key,
        allow_private_webhooks=allow_private_webhooks,
        webhook_policy=WebhookPolicy(first_backoff_s=webhook_backoff_s),
        runtime=runtime, kubeconfig=kubeconfig, kube_regions=tuple(kube_region or ()),
        in_cluster=in_cluster, namespace=namespace, image=image,
        slurm_conf=slurm_conf, partition=partition, slurm_shared_dir=slurm_shared_dir,
        fleet_from_slurm=fleet_from_slurm, region=region, slurm_gpu_type=slurm_gpu_type,
        victim_policy=victim_policy, min_runtime_s=min_runtime_s,
        on_demand_hold_s=on_demand_hold_s, sandbox=not no_sandbox,
        credit_lost_work=credit_lost_work, fleet_from_kubernetes=fleet_from_kubernetes,
        kube_label_prefix=kube_label_prefix, kube_preemptible_taint=kube_preemptible_taint,
        kube_event_reason=kube_event_reason, kube_storage_class=kube_storage_class,
        kube_volume_access=kube_volume_access,
    )  # fmt: skip
    with _clear_errors():
        run_server(options, typer.echo)


@app.command(epilog=examples("lowcostgpu templates"))
def templates() -> None:
    """List the launch templates (`--template NAME`)."""
    from rich.console import Console
    from rich.table import Table

    from lowcostgpu.templates.registry import list_templates

    table = Table("template", "what it runs", "needs")
    for t in list_templates():
        table.add_row(t.name, t.summary, ", ".join(t.extras_needed) or "-")
    Console().print(table)


@app.command(
    epilog=examples(
        "lowcostgpu sim --trace synthetic --days 1 --report /tmp/sim",
        "lowcostgpu sim --trace alibaba:DIR --fleet-scale 0.02 --policy all --report /tmp/ali",
        "lowcostgpu sim --trace stress:gpus=300,days=2 --policy all --report /tmp/stress",
    )
)
def sim(
    trace: Annotated[
        str,
        typer.Option(
            help="alibaba:DIR (the Alibaba GPU trace folder), synthetic[:key=value,…], "
            "stress[:key=value,…] (a GPU cloud's fleet and day), or a CSV trace file"
        ),
    ],
    report: Annotated[Path, typer.Option(help="folder for report.json and report.html")],
    fleet: Annotated[
        Path | None, typer.Option(help="fleet TOML file (default: the demo fleet)")
    ] = None,
    policy: Annotated[
        str,
        typer.Option(
            help="victim policy (or `clairvoyant`, `clairvoyant-fair`: the simulator's "
            "yardsticks that know each job's true loss), or `all` to compare them"
        ),
    ] = "all",
    days: Annotated[float | None, typer.Option(help="simulate only the first N days")] = None,
    seed: Annotated[int, typer.Option(help="seed of every pseudo-random choice")] = 0,
    catalog: Annotated[
        Path | None, typer.Option(help="catalog TOML (prices) instead of the shipped one")
    ] = None,
    fleet_scale: Annotated[
        float,
        typer.Option(
            help="Alibaba: keep this share of each GPU model's nodes; stress: of its GPUs"
        ),
    ] = 1.0,
    replicate: Annotated[
        int, typer.Option(help="replicate the fleet and the jobs N times (scaling studies)")
    ] = 1,
    risk_warnings: Annotated[
        bool,
        typer.Option(
            help="warn the next victims (PreemptionRisk) so that they save early; "
            "--no-risk-warnings compares without"
        ),
    ] = True,
) -> None:
    """Replay a trace through the real engine and measure what preemption costs."""
    from rich.progress import Progress

    from lowcostgpu.sim.command import run_sim

    with _clear_errors(), Progress(transient=True) as bar:
        tasks: dict[str, object] = {}

        def progress(name: str, now: int, total: int) -> None:
            if name not in tasks:
                tasks[name] = bar.add_task(name, total=total)
            bar.update(tasks[name], completed=now)  # type: ignore[arg-type]

        result = run_sim(
            trace=trace,
            fleet=fleet,
            policy=policy,
            report_dir=report,
            days=days,
            seed=seed,
            catalog=catalog,
            fleet_scale=fleet_scale,
            replicate=replicate,
            progress=progress,
            risk_warnings=risk_warnings,
        )
    from lowcostgpu.sim.figure_words import summary_lines

    for name, figures in result["policies"].items():
        typer.echo("\n".join(summary_lines(name, figures)))
    typer.echo(
        f"report: {report / 'report.json'} (every figure; figures_explained says what each "
        f"means) and {report / 'report.html'}"
    )


def _register() -> None:
    """The commands that talk to a server, one module per area."""
    from lowcostgpu.cli import admin, billing, clusters, events, instances, volumes, webhooks

    for module in (instances, events, webhooks, billing, clusters, admin, volumes):
        module.register(app)


_register()


@contextmanager
def _clear_errors() -> Iterator[None]:
    """Our own errors become a message and exit code 2, never a traceback."""
    try:
        yield
    except LowcostgpuError as exc:
        typer.echo(f"error: {exc.message}", err=True)
        if exc.hint:
            typer.echo(f"  {exc.hint}", err=True)
        raise typer.Exit(2) from None
