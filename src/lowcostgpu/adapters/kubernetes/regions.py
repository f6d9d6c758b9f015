"""One control plane over several Kubernetes clusters: one per region (`serve --kube-region
REGION=KUBECONFIG`, repeated). Each pool lives in one region, so each host is a Node of one
cluster; the routers here send every call to the cluster that holds what it is about.

- `RegionalRuntime`: a start goes to its host's region. A call about an allocation (signal,
  kill, forget, logs) goes to the region that started it, remembered; after a restart it asks
  each region in turn whether it holds the allocation (one read per region, then remembered).
  `observe` is every region's reports together.
- `RegionalNodes`: a node effect goes to its host's region (the payload's host, else the
  node's, read from the store by its key).
- `RegionalVolumes`: a claim lives in one cluster: `ensure` makes it in the instance's region,
  and `check_fits` refuses a launch whose volume already lives in another region (its data
  cannot follow the run). The calls that name no region go to the regions that hold the claim.

An unknown region or host is a clear error naming the `--kube-region` settings.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Literal

from lowcostgpu.adapters.kubernetes.nodes import KubernetesNodes
from lowcostgpu.adapters.kubernetes.runtime import KubernetesRuntime
from lowcostgpu.adapters.kubernetes.volumes import KubernetesVolumes
from lowcostgpu.domain.errors import ConfigError, InvalidRequest, NotFound
from lowcostgpu.ports.runtime import Runtime, VolumeMount, WorkloadReport, WorkloadStart
from lowcostgpu.ports.store import Store
from lowcostgpu.ports.store_records import OutboxEntry


class HostRegions:
    """Which region each fleet host is in, and what to say about one that is in none."""

    def __init__(self, host_regions: Mapping[str, str], regions: Mapping[str, object]) -> None:
        missing = sorted({r for r in host_regions.values() if r not in regions})
        if missing:
            raise ConfigError(
                f"the fleet has hosts in region(s) {', '.join(missing)}, which no --kube-region "
                "names",
                hint="give each region of the fleet its cluster: --kube-region "
                f"{missing[0]}=KUBECONFIG (the regions given: {', '.join(sorted(regions))})",
            )
        self._of = dict(host_regions)

    def of(self, host_id: str) -> str:
        region = self._of.get(host_id)
        if region is None:
            raise NotFound(
                f"host {host_id} is in no region of the fleet",
                hint="add it to the fleet file, in a region that --kube-region names",
            )
        return region


class RegionalRuntime:
    """`ports.runtime.Runtime` over one `KubernetesRuntime` per region."""

    def __init__(self, runtimes: Mapping[str, KubernetesRuntime], hosts: HostRegions) -> None:
        self.runtimes = dict(runtimes)
        self.hosts = hosts
        self._region_of: dict[str, str] = {}  # allocation id → region; dropped on forget

    def watch(self, on_change: Callable[[], None] | None = None) -> None:
        for runtime in self.runtimes.values():
            runtime.watch(on_change)

    def close(self) -> None:
        for runtime in self.runtimes.values():
            runtime.close()

    def gang_address(self, gang_id: str, master_host_id: str) -> str:
        """Rank 0's address, as the region of its host publishes it."""
        return self.runtimes[self.hosts.of(master_host_id)].gang_address(gang_id, master_host_id)

    def start(self, start: WorkloadStart) -> None:
        region = self.hosts.of(start.host_id)
        self.runtimes[region].start(start)
        self._region_of[start.allocation_id] = region

    def signal(self, allocation_id: str, signal: Literal["SIGTERM"]) -> None:
        runtime = self._holder(allocation_id)
        if runtime is not None:
            runtime.signal(allocation_id, signal)

    def kill(self, allocation_id: str) -> None:
        runtime = self._holder(allocation_id)
        if runtime is not None:
            runtime.kill(allocation_id)

    def observe(self) -> list[WorkloadReport]:
        """Every region's reports, by allocation id. Cost: what each region's observe costs."""
        reports = [r for runtime in self.runtimes.values() for r in runtime.observe()]
        return sorted(reports, key=lambda r: r.allocation_id)

    def forget(self, allocation_id: str) -> None:
        runtime = self._holder(allocation_id)
        if runtime is not None:
            runtime.forget(allocation_id)
        self._region_of.pop(allocation_id, None)

    def logs(self, allocation_id: str, tail_bytes: int = 65536) -> str:
        runtime = self._holder(allocation_id)
        if runtime is None:  # no region holds it: the region's own words (NotFound)
            runtime = next(iter(self.runtimes.values()))
        return runtime.logs(allocation_id, tail_bytes)

    def _holder(self, allocation_id: str) -> KubernetesRuntime | None:
        """The runtime of the region that holds the allocation: remembered, else asked in turn
        (after a restart; one read per region); None if none does (it is gone everywhere)."""
        region = self._region_of.get(allocation_id)
        if region is not None:
            return self.runtimes[region]
        for region, runtime in self.runtimes.items():
            if runtime.holds(allocation_id):
                self._region_of[allocation_id] = region
                return runtime
        return None


class RegionalNodes:
    """`ports.nodes.NodeProvider` over one `KubernetesNodes` per region."""

    def __init__(
        self,
        providers: Mapping[str, KubernetesNodes],
        runtime: RegionalRuntime,
        hosts: HostRegions,
        store: Store,
    ) -> None:
        self.providers = dict(providers)
        self.runtime = runtime
        self.hosts = hosts
        self.store = store

    def carry_out(self, entry: OutboxEntry, runtime: Runtime) -> None:
        host = self._host_of(entry)
        if host is None:
            return  # a node the store never wrote: nothing holds it anywhere
        region = self.hosts.of(host)
        self.providers[region].carry_out(entry, self.runtime.runtimes[region])

    def _host_of(self, entry: OutboxEntry) -> str | None:
        host = entry.payload.get("host_id")
        if host is not None:
            return str(host)
        try:
            return self.store.node(str(entry.payload["node_id"])).state.host_id
        except NotFound:
            return None


class RegionalVolumes:
    """`ports.runtime.Volumes` over one `KubernetesVolumes` per region."""

    def __init__(self, volumes: Mapping[str, KubernetesVolumes]) -> None:
        self.volumes = dict(volumes)

    def ensure(
        self, account_id: str, name: str, size_gb: int, *, region: str | None = None
    ) -> VolumeMount:
        return self._in(region).ensure(account_id, name, size_gb)

    def check_fits(
        self, account_id: str, name: str, size_gb: int | None, *, region: str | None = None
    ) -> None:
        """Refuse a volume that lives in another region than the launch's. Cost: one read per
        other region."""
        here = self._in(region)
        elsewhere = [
            r for r, v in self.volumes.items() if v is not here and v.holds(account_id, name)
        ]
        if elsewhere:
            raise InvalidRequest(
                f"volume {name} lives in region {elsewhere[0]}: its data cannot follow a run "
                f"in {region}",
                hint=f"launch in region {elsewhere[0]} (--region {elsewhere[0]}), or use "
                "another volume name for this region",
            )
        here.check_fits(account_id, name, size_gb)

    def usage_bytes(self, account_id: str, name: str) -> int:
        for volumes in self._holding(account_id, name):
            return volumes.usage_bytes(account_id, name)
        raise NotFound(f"volume {name} has no claim in any region yet")

    def delete(self, account_id: str, name: str) -> None:
        for volumes in self.volumes.values():  # idempotent: a region without it does nothing
            volumes.delete(account_id, name)

    def resize(self, account_id: str, name: str, size_gb: int) -> None:
        for volumes in self._holding(account_id, name):
            volumes.resize(account_id, name, size_gb)

    def _holding(self, account_id: str, name: str) -> list[KubernetesVolumes]:
        return [v for v in self.volumes.values() if v.holds(account_id, name)]

    def _in(self, region: str | None) -> KubernetesVolumes:
        if region is None or region not in self.volumes:
            raise InvalidRequest(
                f"region {region!r} has no Kubernetes cluster here",
                hint=f"use one of the regions {', '.join(sorted(self.volumes))}",
            )
        return self.volumes[region]
