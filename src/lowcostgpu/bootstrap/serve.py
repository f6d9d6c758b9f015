"""`lowcostgpu serve`: the control plane on this machine — store, runtime, loop and API.

The runtime is the local one (process groups on this machine) or Kubernetes (`--runtime
kubernetes --kubeconfig FILE`: instances are pods, cluster nodes are Node objects; see
docs/kubernetes.md)."""

from __future__ import annotations

import logging
import os
import shutil
import socket
import time
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
from lowcostgpu.bootstrap.listen import check_listen
from lowcostgpu.bootstrap.wiring import Wired, wire
from lowcostgpu.core.metering import check_interval
from lowcostgpu.core.policies import DEFAULT_POLICY_NAME, policy_by_name
from lowcostgpu.core.scheduler import SchedulerConfig
from lowcostgpu.domain.errors import ConfigError
from lowcostgpu.ports.nodes import NodeProvider
from lowcostgpu.ports.runtime import Runtime, Volumes
from lowcostgpu.ports.store import Store

if TYPE_CHECKING:  # the kubernetes client is imported only when --runtime kubernetes is used
    from lowcostgpu.adapters.kubernetes import Kube

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
    runtime: str = "local"  # local | kubernetes
    kubeconfig: Path | None = None  # kubernetes: None is $KUBECONFIG or ~/.kube/config
    namespace: str = "default"  # kubernetes: where instance pods and volume claims live
    image: str | None = None  # kubernetes: the workload container image
    victim_policy: str = DEFAULT_POLICY_NAME  # which preemptible work a reclaim takes first
    min_runtime_s: int = 300  # a (re)started preemptible allocation's protection from reclaim
    on_demand_hold_s: int = 120  # GPUs freed after an on-demand refusal wait this long for it
    # local runtime: sandbox every workload (docs/security.md). True: required (`serve`'s default;
    # refuse to start without bwrap), False: `--no-sandbox`, None: when this machine can (demo).
    sandbox: bool | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"


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


def connect(options: ServeOptions) -> Kube | None:
    """The Kubernetes API server of `--runtime kubernetes`, reached now: a bad kubeconfig or an
    unreachable server is a clear error at start, before any state is written."""
    if options.runtime == "local":
        return None
    if options.runtime != "kubernetes":
        raise ConfigError(
            f"unknown runtime {options.runtime!r}", hint="use --runtime local or kubernetes"
        )
    from lowcostgpu.adapters.kubernetes import Kube

    kube = Kube.from_kubeconfig(options.kubeconfig)
    kube.eviction_version()
    kube.check_namespace(options.namespace)
    return kube


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
    kube: Kube | None,
    sandbox: SandboxPolicy | None = None,
) -> tuple[Runtime, Volumes, NodeProvider | None]:
    """The runtime, volumes and node provider `--runtime` names."""
    if kube is None:
        local = LocalRuntime(data_dir / "runtime", sandbox=sandbox)
        return local, LocalVolumes(data_dir), None
    from lowcostgpu.adapters.kubernetes import KubernetesNodes, KubernetesRuntime, KubernetesVolumes
    from lowcostgpu.adapters.kubernetes.runtime import DEFAULT_IMAGE

    nodes = KubernetesNodes(kube, store, plane=options.namespace)
    image = options.image or DEFAULT_IMAGE
    runtime = KubernetesRuntime(kube, namespace=options.namespace, image=image, nodes=nodes)
    return runtime, KubernetesVolumes(kube, namespace=options.namespace), nodes


def build(options: ServeOptions) -> tuple[Wired, ReconcileLoop, Runtime]:
    check_interval(options.metering_interval_s)
    options.webhook_policy.check()
    scheduler = SchedulerConfig(
        min_runtime_s=options.min_runtime_s,
        on_demand_hold_s=options.on_demand_hold_s,
        policy=policy_by_name(options.victim_policy),
    )
    catalog = load_catalog(options.catalog)
    hosts = load_fleet(options.fleet, catalog)
    kube = connect(options)
    check_listen(options.host, options.port)
    sandbox = sandbox_of(options)
    data_dir = prepare_data_dir(options.data_dir)
    store = SqlStore.open(options.db or f"sqlite:///{data_dir / 'lowcostgpu.db'}")
    runtime, volumes, nodes = runtime_of(options, data_dir, store, kube, sandbox)
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
        config=PlaneConfig(scheduler, metering_interval_s=options.metering_interval_s),
    )
    wired.plane.standby = True  # until the loop holds the store's lead
    if kube is not None:  # observe from a watch; a changed pod wakes the loop at once
        from lowcostgpu.adapters.kubernetes import KubernetesRuntime

        assert isinstance(runtime, KubernetesRuntime)
        runtime.watch(on_change=wired.plane.wake.set)
    loop = ReconcileLoop(wired.plane, owner=f"{socket.gethostname()}:{os.getpid()}")
    return wired, loop, runtime
