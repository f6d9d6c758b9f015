"""`lowcostgpu serve`: the control plane on this machine — store, runtime, loop and API.

The runtime is the local one (process groups on this machine), Kubernetes (`--runtime
kubernetes --kubeconfig FILE`, or one `--kube-region REGION=FILE` per region: instances are
pods, cluster nodes are the GPU hosts' own Nodes; see docs/kubernetes.md and
`bootstrap.kubernetes`) or Slurm (`--runtime slurm --slurm-conf FILE`: a run is a Slurm job in
lowcostgpu's partition, its records and the volumes on a shared filesystem; see docs/slurm.md)."""

from __future__ import annotations

import logging
import os
import shutil
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from lowcostgpu.adapters.clock import RandomIds, SystemClock
from lowcostgpu.adapters.files import load_catalog, load_fleet
from lowcostgpu.adapters.local.runtime import LocalRuntime
from lowcostgpu.adapters.local.sandbox import SandboxPolicy, sandbox_policy
from lowcostgpu.adapters.local.volumes import LocalVolumes
from lowcostgpu.adapters.store.sql import SqlStore
from lowcostgpu.adapters.webhooks import HttpWebhookSender
from lowcostgpu.app.loop import ReconcileLoop
from lowcostgpu.app.plane import PlaneConfig
from lowcostgpu.app.webhooks import WebhookPolicy, Webhooks
from lowcostgpu.bootstrap import token_keys
from lowcostgpu.bootstrap.kubernetes import (
    SERVICE_ACCOUNT_DIR,
    KubeClusters,
    KubeOptions,
    kube_hosts_of,
    kube_names,
    kube_runtime_of,
)
from lowcostgpu.bootstrap.kubernetes import connect as connect_kubernetes
from lowcostgpu.bootstrap.listen import check_listen
from lowcostgpu.bootstrap.wiring import Wired, wire
from lowcostgpu.core.metering import check_interval
from lowcostgpu.core.nodes import DEFAULT_NAMING
from lowcostgpu.core.policies import DEFAULT_POLICY_NAME, policy_by_name
from lowcostgpu.core.scheduler import SchedulerConfig
from lowcostgpu.domain.errors import ConfigError, InvalidRequest
from lowcostgpu.ports.nodes import NodeProvider
from lowcostgpu.ports.runtime import Runtime, Volumes
from lowcostgpu.ports.store import Store

if TYPE_CHECKING:
    from lowcostgpu.adapters.slurm import Slurm
    from lowcostgpu.domain.capacity import Host
    from lowcostgpu.domain.catalog import Catalog

MIN_FREE_BYTES = 64 * 2**20
log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ServeOptions:
    data_dir: Path
    db: str | None = None
    fleet: Path | None = None
    catalog: Path | None = None
    host: str = "127.0.0.1"
    port: int = 8080
    metering_interval_s: int = 60
    admin_key: str | None = None  # None: keep the stored one, or make one at the first start
    allow_private_webhooks: bool = False  # webhooks to loopback/private addresses (tests, labs)
    webhook_policy: WebhookPolicy = field(default_factory=WebhookPolicy)
    runtime: str = "local"  # local | kubernetes | slurm
    kubeconfig: Path | None = None  # kubernetes: None is $KUBECONFIG or ~/.kube/config
    kube_regions: tuple[str, ...] = ()  # kubernetes: REGION=KUBECONFIG each, not --kubeconfig
    in_cluster: bool = False  # kubernetes: the cluster this pod runs in (its ServiceAccount)
    service_account_dir: Path = SERVICE_ACCOUNT_DIR  # --in-cluster: the token and CA's folder
    namespace: str = "default"  # kubernetes: where instance pods and volume claims live
    image: str | None = None  # kubernetes: the workload container image
    slurm_conf: Path | None = None  # slurm: None is $SLURM_CONF or Slurm's default
    partition: str = "lowcostgpu"  # slurm: the partition lowcostgpu's jobs run in
    slurm_shared_dir: Path | None = None  # slurm: None is <data_dir>/slurm (docs/slurm.md)
    fleet_from_slurm: bool = False  # slurm: the fleet is the partition's nodes (no --fleet)
    region: str = "slurm"  # slurm, --fleet-from-slurm: the region of the partition's hosts
    slurm_gpu_type: str | None = None  # --fleet-from-slurm: type of nodes that name none
    victim_policy: str = DEFAULT_POLICY_NAME  # which preemptible work a reclaim takes first
    min_runtime_s: int = 300  # a (re)started preemptible allocation's protection from reclaim
    on_demand_hold_s: int = 120  # GPUs freed after an on-demand refusal wait this long for it
    credit_lost_work: bool = False  # a reclaim credits the work lost since the last checkpoint
    fleet_from_kubernetes: bool = False  # kubernetes: the fleet is the labelled GPU Nodes
    kube_label_prefix: str = "lowcostgpu.io"  # kubernetes: names on Nodes (`KubeNames`)
    kube_preemptible_taint: str | None = None  # kubernetes: KEY=VALUE:EFFECT
    kube_event_reason: str = "NodePreempted"  # kubernetes: the reclaim's Event reason
    kube_storage_class: str | None = None  # kubernetes: volume claims' storage class
    kube_volume_access: str = "ReadWriteOnce"  # kubernetes: ReadWriteMany for multi-node
    # local runtime: sandbox every workload (docs/security.md). True: required (`serve`'s default;
    # refuse to start without bwrap), False: `--no-sandbox`, None: when this machine can (demo).
    sandbox: bool | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def kube(self) -> KubeOptions:
        return KubeOptions(
            kubeconfig=self.kubeconfig,
            kube_regions=self.kube_regions,
            in_cluster=self.in_cluster,
            service_account_dir=self.service_account_dir,
            namespace=self.namespace,
            image=self.image,
            fleet_from_kubernetes=self.fleet_from_kubernetes,
            region=self.region,
            label_prefix=self.kube_label_prefix,
            preemptible_taint=self.kube_preemptible_taint,
            event_reason=self.kube_event_reason,
            storage_class=self.kube_storage_class,
            volume_access=self.kube_volume_access,
        )


def prepare_data_dir(path: Path) -> Path:
    """Create the data directory, or say clearly why it cannot be used — before writing state."""
    path = path.expanduser().resolve()
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".probe-{os.getpid()}"
        probe.write_bytes(b"ok")
        probe.unlink()
    except OSError as exc:
        raise ConfigError(
            f"the data directory {path} cannot be written: {exc.strerror or exc}",
            hint="choose another with --data-dir, or fix its permissions",
        ) from None
    free = shutil.disk_usage(path).free
    if free < MIN_FREE_BYTES:
        raise ConfigError(
            f"the disk of {path} has only {free // 2**20} MiB free; lowcostgpu needs at least "
            f"{MIN_FREE_BYTES // 2**20} MiB for its store and logs",
            hint="free some space or choose another --data-dir",
        )
    return path


def webhooks_of(options: ServeOptions, wired: Wired) -> Webhooks:
    """The webhook service and worker of a served plane (posting through httpx)."""
    sender = HttpWebhookSender(
        allow_private=options.allow_private_webhooks, timeout_s=options.webhook_policy.timeout_s
    )
    return Webhooks(wired.plane.store, sender, wired.plane.clock, options.webhook_policy)


def connect(options: ServeOptions) -> KubeClusters | None:
    """The Kubernetes clusters of `--runtime kubernetes`, reached now: a bad kubeconfig or an
    unreachable server is a clear error at start, before any state is written."""
    if options.runtime in ("local", "slurm"):
        if options.kube_regions or options.in_cluster:
            flag = "--kube-region" if options.kube_regions else "--in-cluster"
            raise ConfigError(f"{flag} needs --runtime kubernetes", hint=f"leave out {flag}")
        return None
    if options.runtime != "kubernetes":
        raise ConfigError(
            f"unknown runtime {options.runtime!r}",
            hint="use --runtime local, kubernetes or slurm",
        )
    return connect_kubernetes(options.kube)


SLURM_DEFAULT_CONF = Path("/etc/slurm/slurm.conf")


def connect_slurm(options: ServeOptions) -> Slurm | None:
    """The Slurm cluster of `--runtime slurm`, reached now: a missing or bad slurm.conf, a
    slurmctld that does not answer, or a partition that is not there (or preempts by itself) is
    a clear error at start, before any state is written."""
    if options.runtime != "slurm":
        return None
    from lowcostgpu.adapters.slurm import Slurm
    from lowcostgpu.adapters.slurm.fleet import check_cluster

    conf = options.slurm_conf or Path(os.environ.get("SLURM_CONF") or SLURM_DEFAULT_CONF)
    if not conf.is_file():  # Slurm's commands would retry a missing file for 60 s
        raise ConfigError(
            f"the Slurm configuration {conf} does not exist (or is not a file)",
            hint="give the cluster's slurm.conf with --slurm-conf FILE (or SLURM_CONF); "
            "for a throw-away cluster: scripts/slurm-lab.sh start DIR",
        )
    slurm = Slurm(conf.resolve())
    try:
        check_cluster(slurm, options.partition)
    except InvalidRequest as exc:  # any other refusal of the checks: in Slurm's own words
        raise ConfigError(
            f"{slurm.where} cannot be used: {exc.message}",
            hint="check --slurm-conf (`SLURM_CONF=FILE scontrol ping` shows what is wrong)",
        ) from None
    return slurm


def hosts_of(
    options: ServeOptions,
    catalog: Catalog,
    slurm: Slurm | None,
    hosts: list[Host],
    kube: KubeClusters | None = None,
) -> list[Host]:
    """The fleet: the fleet file's hosts; on Slurm checked against the partition's nodes (a
    clear error on a disagreement, see `adapters.slurm.fleet`), or taken from them; the same on
    Kubernetes against its Nodes."""
    if kube is not None:
        return kube_hosts_of(options.kube, catalog, kube, hosts)
    if slurm is None:
        return hosts
    from lowcostgpu.adapters.slurm.fleet import check_fleet, fleet_from_slurm, partition_nodes

    nodes = partition_nodes(slurm, options.partition)
    if options.fleet_from_slurm:
        return fleet_from_slurm(
            nodes,
            catalog,
            region=options.region,
            partition=options.partition,
            gpu_type=options.slurm_gpu_type,
        )
    for warning in check_fleet(hosts, nodes, options.partition, catalog):
        log.warning("%s", warning)
    return hosts


def fleet_file_of(options: ServeOptions, catalog: Catalog) -> list[Host]:
    """The fleet file's hosts (the shipped demo fleet without --fleet, except on Slurm: there
    the fleet must be the cluster's, from a file or from the partition)."""
    if options.fleet_from_slurm:
        if options.runtime != "slurm":
            raise ConfigError(
                "--fleet-from-slurm needs --runtime slurm", hint="leave out --fleet-from-slurm"
            )
        if options.fleet is not None:
            raise ConfigError(
                "--fleet and --fleet-from-slurm were both given",
                hint="give one: a fleet file (checked against the partition) or the partition",
            )
        return []  # read from the partition once Slurm answers (`hosts_of`)
    if options.fleet_from_kubernetes:
        if options.runtime != "kubernetes" or options.fleet is not None:
            raise ConfigError(
                "--fleet-from-kubernetes needs --runtime kubernetes and no --fleet",
                hint="give one: a fleet file (checked against the cluster) or the cluster's "
                "labelled Nodes",
            )
        return []  # read from the cluster once it answers (`hosts_of`)
    if options.runtime == "slurm" and options.fleet is None:
        raise ConfigError(
            "--runtime slurm needs the fleet of the partition: the demo fleet is not your cluster",
            hint="give --fleet FILE (checked against sinfo at start) or --fleet-from-slurm",
        )
    return load_fleet(options.fleet, catalog)


def sandbox_of(options: ServeOptions) -> SandboxPolicy | None:
    """The local runtime's sandbox; checked before any state is written, so that a machine
    without bwrap is one clear error naming `--no-sandbox` (docs/security.md)."""
    if options.runtime != "local":
        return None
    policy = None
    if options.sandbox is not False:
        data_dir = options.data_dir.expanduser().resolve()
        policy = sandbox_policy([data_dir], require=options.sandbox is True)
    if policy is None:
        log.warning(
            "WORKLOADS ARE NOT SANDBOXED (%s): every workload runs as this server's user and "
            "can read the data directory, the store, the token keys and other accounts' "
            "volumes. Do not let untrusted customers launch here (docs/security.md).",
            "--no-sandbox" if options.sandbox is False else "bwrap is not usable here",
        )
    return policy


def runtime_of(
    options: ServeOptions,
    data_dir: Path,
    store: Store,
    kube: KubeClusters | None,
    sandbox: SandboxPolicy | None = None,
    slurm: Slurm | None = None,
    hosts: Sequence[Host] = (),
) -> tuple[Runtime, Volumes, NodeProvider | None]:
    """The runtime, volumes and node provider `--runtime` names."""
    if slurm is not None:
        return _slurm_runtime(options, data_dir, store, slurm)
    if kube is None:
        local = LocalRuntime(data_dir / "runtime", sandbox=sandbox)
        return local, LocalVolumes(data_dir), None
    return kube_runtime_of(options.kube, store, kube, hosts)


def _slurm_runtime(
    options: ServeOptions, data_dir: Path, store: Store, slurm: Slurm
) -> tuple[Runtime, Volumes, NodeProvider | None]:
    """Slurm jobs in `--partition`; their records (`runtime/`) and the volumes (`volumes/`) in
    the shared directory, which every node must mount at the same path (docs/slurm.md).

    Volume size limits are enforced (loop-mounted images, as on the local runtime) only when
    every node of the partition runs on this machine (a lab): a loop mount made here is not seen
    by another machine, whose workload would write under it."""
    from lowcostgpu.adapters.slurm import SlurmNodes, SlurmRuntime
    from lowcostgpu.adapters.slurm.fleet import partition_nodes

    shared = (options.slurm_shared_dir or data_dir / "slurm").expanduser().resolve()
    try:
        (shared / "runtime").mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(
            f"the Slurm shared directory {shared} cannot be made: {exc.strerror or exc}",
            hint="give --slurm-shared-dir a directory on the filesystem every node mounts",
        ) from None
    here = all(n.on_loopback for n in partition_nodes(slurm, options.partition))
    _warn_slurm_volumes(shared, limits_enforceable=here)
    volumes = LocalVolumes(shared, enforce=None if here else False)
    # Cluster nodes are whole Slurm nodes in partitions of their own (adapters/slurm/nodes.py);
    # their records sit beside the runs' (a dot directory: the runtime's observe skips it).
    nodes = SlurmNodes(slurm, store, shared / "runtime" / ".nodes")
    runtime = SlurmRuntime(slurm, shared / "runtime", partition=options.partition, nodes=nodes)
    return runtime, volumes, nodes


def _warn_slurm_volumes(shared: Path, *, limits_enforceable: bool) -> None:
    if not limits_enforceable:
        log.warning(
            "volumes under %s are plain directories on the shared filesystem: their size limit "
            "is reported, not enforced (a loop mount made here is not seen by other nodes)",
            shared,
        )
    log.warning(
        "Slurm workloads run as this server's user on the nodes, not sandboxed: each can read "
        "the other accounts' volumes under %s. Do not let untrusted customers launch here "
        "(docs/slurm.md).",
        shared,
    )


def build(options: ServeOptions) -> tuple[Wired, ReconcileLoop, Runtime]:
    check_interval(options.metering_interval_s)
    options.webhook_policy.check()
    scheduler = SchedulerConfig(
        min_runtime_s=options.min_runtime_s,
        on_demand_hold_s=options.on_demand_hold_s,
        policy=policy_by_name(options.victim_policy),
    )
    catalog = load_catalog(options.catalog)
    hosts = fleet_file_of(options, catalog)
    kube = connect(options)
    slurm = connect_slurm(options)
    hosts = hosts_of(options, catalog, slurm, hosts, kube)
    check_listen(options.host, options.port)
    sandbox = sandbox_of(options)
    data_dir = prepare_data_dir(options.data_dir)
    store = SqlStore.open(options.db or f"sqlite:///{data_dir / 'lowcostgpu.db'}")
    runtime, volumes, nodes = runtime_of(options, data_dir, store, kube, sandbox, slurm, hosts)
    wired = wire(
        store=store,
        runtime=runtime,
        volumes=volumes,
        nodes=nodes,
        clock=SystemClock(),
        ids=RandomIds(),
        hosts=hosts,
        catalog=catalog,
        tokens=token_keys.rotate(data_dir, [i.state for i in store.live_instances()], time.time()),
        metadata_url=f"{options.url}/v1/metadata",
        config=PlaneConfig(
            scheduler,
            metering_interval_s=options.metering_interval_s,
            # a Slurm partition holds whole nodes; kube-scheduler places pods on whole Nodes
            whole_host_nodes=slurm is not None or kube is not None,
            credit_lost_work=options.credit_lost_work,
            node_naming=kube_names(options.kube).naming if kube is not None else DEFAULT_NAMING,
        ),
    )
    wired.plane.standby = True  # until the loop holds the store's lead
    watch = getattr(runtime, "watch", None)  # Kubernetes: observe from watches, one per cluster
    if watch is not None:  # a changed pod wakes the loop at once
        watch(on_change=wired.plane.wake.set)
    loop = ReconcileLoop(wired.plane, owner=f"{socket.gethostname()}:{os.getpid()}")
    return wired, loop, runtime
