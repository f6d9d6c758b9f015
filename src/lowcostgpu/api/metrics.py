"""`/metrics` for Prometheus: fleet gauges read at scrape time, request counters.

A registry per app (not the process-wide default), so two apps in one process (tests) never
collide. The gauges are computed when scraped, from the engine state of the last decision
(`ControlPlane.snapshot()`: no lock, no store read) and, for interruptions, one indexed read of
the window's `Preempted` events (`queries.interruption_statistics`): a scrape costs
O(hosts + allocations + live instances + Preempted events in the window), never a scan of all
instances or of the event log, however long the history.

`lowcostgpu_background_restarts_total{loop}` counts how often the supervisor started a background
loop again after it died (`app.supervisor`): anything above 0 is a bug worth a look, and a count
that keeps rising is a loop that keeps dying.
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Callable, Iterator, Mapping

from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from lowcostgpu.api.context import ApiContext
from lowcostgpu.app import queries


class FleetCollector(Collector):
    def __init__(self, ctx: ApiContext) -> None:
        self.ctx = ctx

    def collect(self) -> Iterator[Metric]:
        gpus = GaugeMetricFamily(
            "lowcostgpu_gpus", "GPUs per pool and use", labels=["region", "gpu_type", "use"]
        )
        queue = GaugeMetricFamily(
            "lowcostgpu_queue_depth", "Queued instances per pool", labels=["region", "gpu_type"]
        )
        for p in queries.pools(self.ctx.plane):
            for use, n in (
                ("free", p.free_gpus),
                ("on_demand", p.on_demand_gpus),
                ("interruptible", p.interruptible_gpus),
                ("total", p.gpus),
            ):
                gpus.add_metric([p.region, p.gpu_type, use], n)
            queue.add_metric([p.region, p.gpu_type], p.queue_depth)
        yield gpus
        yield queue
        statuses = Tally(str(i.status) for i in self.ctx.plane.snapshot().instances.values())
        instances = GaugeMetricFamily(
            "lowcostgpu_instances",
            "Live instances by status (queued to interrupted; finished ones are not counted)",
            labels=["status"],
        )
        for status, n in sorted(statuses.items()):
            instances.add_metric([status], n)
        yield instances
        interruptions = GaugeMetricFamily(
            "lowcostgpu_interruptions",
            f"Interruptions per GPU type in the last {queries.STATS_WINDOW_S // 86400} days "
            "(a sliding window: it can fall)",
            labels=["gpu_type"],
        )
        for row in queries.interruption_statistics(self.ctx.plane):
            interruptions.add_metric([row["gpu_type"]], row["interruptions"])
        yield interruptions
        leading = GaugeMetricFamily("lowcostgpu_leading", "1 if this server runs the loop")
        leading.add_metric([], 1 if self.ctx.is_leading() else 0)
        yield leading


class RestartsCollector(Collector):
    """Restarts per supervised loop, read from the supervisor at scrape time."""

    def __init__(self, counts: Callable[[], Mapping[str, int]]) -> None:
        self.counts = counts

    def collect(self) -> Iterator[Metric]:
        restarts = CounterMetricFamily(
            "lowcostgpu_background_restarts",
            "Background loops started again after they died, per loop",
            labels=["loop"],
        )
        for loop, n in sorted(self.counts().items()):
            restarts.add_metric([loop], n)
        yield restarts


class Metrics:
    def __init__(self, ctx: ApiContext) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(FleetCollector(ctx))
        self.requests = Counter(
            "lowcostgpu_http_requests",
            "HTTP requests by method and status",
            ["method", "status"],
            registry=self.registry,
        )

    def count_restarts(self, counts: Callable[[], Mapping[str, int]]) -> None:
        """Export the restarts of the server's supervised loops (`Supervisor.counts`)."""
        self.registry.register(RestartsCollector(counts))

    def count_request(self, method: str, status: int) -> None:
        self.requests.labels(method, str(status)).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
