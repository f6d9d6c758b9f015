"""`serve --runtime kubernetes`: one cluster for the whole fleet (`--kubeconfig`, or
`--in-cluster` from a pod of that cluster), or one per region (`--kube-region REGION=KUBECONFIG`,
repeated; `adapters.kubernetes.regions` routes).

Everything here runs once, at start, before any state is written: a bad kubeconfig, a server
that does not answer, a namespace that is not there or a fleet that disagrees with the cluster
is one clear error then. The kubernetes client is imported only on this path.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from lowcostgpu.domain.errors import ConfigError
from lowcostgpu.ports.nodes import NodeProvider
from lowcostgpu.ports.runtime import Runtime, Volumes
from lowcostgpu.ports.store import Store

if TYPE_CHECKING:
    from lowcostgpu.adapters.kubernetes import Kube
    from lowcostgpu.adapters.kubernetes.names import KubeNames
    from lowcostgpu.domain.capacity import Host
    from lowcostgpu.domain.catalog import Catalog

log = logging.getLogger(__name__)
# Where the kubelet mounts a pod's ServiceAccount token and the cluster's CA.
SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


@dataclass(frozen=True, slots=True)
class KubeOptions:
    """What `serve` was told about its Kubernetes clusters (`ServeOptions`' kubernetes part)."""

    kubeconfig: Path | None = None  # None: $KUBECONFIG or ~/.kube/config
    kube_regions: tuple[str, ...] = ()  # REGION=KUBECONFIG each; instead of kubeconfig
    in_cluster: bool = False  # the cluster this server runs in, as its pod's ServiceAccount
    service_account_dir: Path = SERVICE_ACCOUNT_DIR  # in_cluster: its token and CA
    namespace: str = "default"
    image: str | None = None
    fleet_from_kubernetes: bool = False
    region: str = "slurm"  # --fleet-from-kubernetes with one cluster: its hosts' region
    label_prefix: str = "lowcostgpu.io"
    preemptible_taint: str | None = None
    event_reason: str = "NodePreempted"
    storage_class: str | None = None  # volume claims' storage class (None: the cluster default)
    volume_access: str = "ReadWriteOnce"  # ReadWriteMany: multi-node instances' volumes


@dataclass(frozen=True)
class KubeClusters:
    """The clusters, reached: `single` serves every region of the fleet, else `regions` holds
    one per region."""

    single: Kube | None = None
    regions: Mapping[str, Kube] = field(default_factory=dict)

    def each(self) -> list[tuple[str | None, Kube]]:
        """(region, cluster) pairs; the region is None for the one cluster of every region."""
        if self.single is not None:
            return [(None, self.single)]
        return sorted(self.regions.items())


def parse_kube_regions(values: Sequence[str]) -> dict[str, Path]:
    """`--kube-region REGION=KUBECONFIG` values, each region once."""
    regions: dict[str, Path] = {}
    for value in values:
        region, sep, path = value.partition("=")
        region, path = region.strip(), path.strip()
        if not sep or not region or not path:
            raise ConfigError(
                f"--kube-region {value!r} is not REGION=KUBECONFIG",
                hint="e.g. --kube-region eu-west=/etc/lowcostgpu/eu-west.kubeconfig, once per "
                "region",
            )
        if region in regions:
            raise ConfigError(
                f"--kube-region names region {region} twice",
                hint="give each region one cluster: one kubeconfig per region",
            )
        regions[region] = Path(path).expanduser()
    return regions


def connect(options: KubeOptions) -> KubeClusters:
    """Reach every cluster now: its Eviction API version and the workloads' namespace."""
    from lowcostgpu.adapters.kubernetes import Kube

    regions = parse_kube_regions(options.kube_regions)
    given = [
        flag
        for flag, on in (
            ("--kubeconfig", options.kubeconfig is not None),
            ("--kube-region", bool(regions)),
            ("--in-cluster", options.in_cluster),
        )
        if on
    ]
    if len(given) > 1:
        raise ConfigError(
            f"{' and '.join(given)} were both given",
            hint="give one: --kubeconfig (one cluster for every region), one --kube-region "
            "REGION=KUBECONFIG per region, or --in-cluster (the cluster this pod runs in)",
        )
    if options.in_cluster:
        account = options.service_account_dir
        kube = Kube.in_cluster(token_file=account / "token", ca_file=account / "ca.crt")
        return KubeClusters(single=_reached(kube, options))
    if not regions:
        return KubeClusters(single=_reached(Kube.from_kubeconfig(options.kubeconfig), options))
    return KubeClusters(
        regions={r: _reached(Kube.from_kubeconfig(p), options) for r, p in regions.items()}
    )


def _reached(kube: Kube, options: KubeOptions) -> Kube:
    kube.eviction_version()
    kube.check_namespace(options.namespace)
    return kube


def kube_names(options: KubeOptions) -> KubeNames:
    """The names on Nodes (`--kube-label-prefix`, `--kube-preemptible-taint`,
    `--kube-event-reason`); a bad one is a ConfigError saying how to write it."""
    from lowcostgpu.adapters.kubernetes.names import KubeNames, parse_taint

    taint = options.preemptible_taint
    return KubeNames(
        prefix=options.label_prefix,
        preempted_reason=options.event_reason,
        preemptible_taint=parse_taint(taint) if taint else None,
    )


def kube_hosts_of(
    options: KubeOptions, catalog: Catalog, clusters: KubeClusters, hosts: list[Host]
) -> list[Host]:
    """The fleet on Kubernetes: the fleet file's hosts checked against each region's cluster
    (a clear error on a disagreement, see `adapters.kubernetes.fleet`), or the labelled Nodes
    (of `--region` for the one cluster; of each `--kube-region`'s own region)."""
    from lowcostgpu.adapters.kubernetes.fleet import check_fleet, fleet_from_kubernetes, gpu_nodes

    names = kube_names(options)
    found: list[Host] = []
    for region, kube in clusters.each():
        nodes = gpu_nodes(kube)
        if options.fleet_from_kubernetes:
            found += fleet_from_kubernetes(
                nodes, catalog, names, region or options.region, kube.server
            )
            continue
        regions = sorted({h.pool.region for h in hosts}) if region is None else [region]
        for each in regions:
            for warning in check_fleet(hosts, nodes, names, each, kube.server):
                log.warning("%s", warning)
    return found if options.fleet_from_kubernetes else hosts


def kube_runtime_of(
    options: KubeOptions, store: Store, clusters: KubeClusters, hosts: Sequence[Host]
) -> tuple[Runtime, Volumes, NodeProvider]:
    """The runtime, volumes and node provider: one cluster's, or the regions' routers."""
    from lowcostgpu.adapters.kubernetes import KubernetesNodes, KubernetesRuntime, KubernetesVolumes
    from lowcostgpu.adapters.kubernetes.regions import (
        HostRegions,
        RegionalNodes,
        RegionalRuntime,
        RegionalVolumes,
    )
    from lowcostgpu.adapters.kubernetes.runtime import DEFAULT_IMAGE

    names, image, namespace = kube_names(options), options.image or DEFAULT_IMAGE, options.namespace

    def trio(
        kube: Kube, host_ids: Sequence[str]
    ) -> tuple[KubernetesRuntime, KubernetesVolumes, KubernetesNodes]:
        nodes = KubernetesNodes(kube, store, names=names, plane=namespace, hosts=host_ids)
        runtime = KubernetesRuntime(kube, namespace=namespace, image=image, nodes=nodes)
        volumes = KubernetesVolumes(
            kube,
            namespace=namespace,
            storage_class=options.storage_class,
            access_mode=options.volume_access,
        )
        return runtime, volumes, nodes

    if clusters.single is not None:
        return trio(clusters.single, [h.id for h in hosts])
    by_region = {
        region: trio(kube, [h.id for h in hosts if h.pool.region == region])
        for region, kube in clusters.regions.items()
    }
    host_regions = HostRegions({h.id: h.pool.region for h in hosts}, by_region)
    runtime = RegionalRuntime({r: t[0] for r, t in by_region.items()}, host_regions)
    nodes = RegionalNodes({r: t[2] for r, t in by_region.items()}, runtime, host_regions, store)
    return runtime, RegionalVolumes({r: t[1] for r, t in by_region.items()}), nodes
