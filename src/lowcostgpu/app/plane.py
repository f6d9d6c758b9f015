"""The control plane: every request and every tick is one decision, written before it is acted on
(how a decision is made, written and carried out: `app.decider`). Metering (`app.meter`) cuts
the open spans when an interval closes.

`ControlPlane` is what the API, the loop and the wiring hold: it answers the requests and wires
the parts that do the work over the one live state, each of which is handed what it needs and
none of which imports this module (an import-linter contract):

- `app.decider.Decider`: the decision lock, the live state, deciding and writing (group commit,
  the retry after a `StaleWrite`), the effects carried out after each commit;
- `app.outbox.OutboxRunner`: carrying out effects, retrying what is pending, giving up;
- `app.meter_pass.MeteringPass`: a metering pass when an interval has closed;
- `app.tick.Ticker`: the loop's tick;
- `app.views.Views`: what readers see, on the leader and on a standby;
- `app.clusters.ClusterService`, `app.volumes.VolumeService`: the cluster and volume requests.

What they share besides the live state — the store, the runtime, the clock, the configuration,
whether this server is a standby — is one `app.context.PlaneContext`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from lowcostgpu.app.clusters import ClusterService
from lowcostgpu.app.commit_batcher import CommitBatcher
from lowcostgpu.app.context import PlaneConfig as PlaneConfig  # the wiring imports it from here
from lowcostgpu.app.context import PlaneContext
from lowcostgpu.app.decider import Decided, Decider
from lowcostgpu.app.decisions import Decision, stamped, written_instance
from lowcostgpu.app.effects import Outcome
from lowcostgpu.app.launch import FleetPools, LaunchRequest, build_launch
from lowcostgpu.app.meter import Meter
from lowcostgpu.app.meter_pass import MeteringPass
from lowcostgpu.app.outbox import OutboxRunner
from lowcostgpu.app.runtime_reports import ReportObserver
from lowcostgpu.app.tick import Ticker
from lowcostgpu.app.views import Views
from lowcostgpu.app.volumes import VolumeService, checkpoint_held, launched_on, reports_a_step
from lowcostgpu.core import engine
from lowcostgpu.core.checkpoint_ages import CheckpointAges
from lowcostgpu.core.engine import EngineState
from lowcostgpu.core.lifecycle import (
    CheckpointReported,
    CompletionReported,
    DeleteRequested,
    LifecycleEvent,
    ResumeRequested,
    StopRequested,
)
from lowcostgpu.domain.capacity import Host, Timestamp
from lowcostgpu.domain.catalog import Catalog
from lowcostgpu.domain.errors import InsufficientCapacity
from lowcostgpu.ports.clock import Clock, IdSource
from lowcostgpu.ports.runtime import Runtime, Volumes
from lowcostgpu.ports.store import Store
from lowcostgpu.ports.store_records import OutboxEntry, StoredInstance


class ControlPlane:
    """Decisions on the live state; effects are carried out right after each commit.

    Cluster requests (`create_cluster`, `update_cluster_target`, `get_cluster`, `list_clusters`,
    `delete_cluster`) are `self.clusters`, an `app.clusters.ClusterService` deciding through
    `self.decider`.

    `store`, `runtime`, `clock`, `hosts`, `catalog`, `config` and `standby` are kept in
    `self.context`, which every part reads at each use: what is set here (the loop sets
    `standby`, a checkpoint report `config`, a test its own store) is what they all see next."""

    def __init__(
        self,
        *,
        store: Store,
        runtime: Runtime,
        clock: Clock,
        ids: IdSource,
        hosts: Sequence[Host],
        catalog: Catalog,
        config: PlaneConfig,
        carry_out: Callable[[Sequence[OutboxEntry]], Outcome],
    ) -> None:
        self.context = PlaneContext(store, runtime, clock, list(hosts), catalog, config)
        self.ids = ids
        self.pools = FleetPools(self.hosts)
        self.volumes: Volumes | None = None  # set by the wiring: where a launch's volume must fit
        self.wake = threading.Event()  # set when a request may have changed the next wake-up
        self.checkpoint_ages = CheckpointAges()  # what the fairness policy charges non-reporters
        self.observer = ReportObserver()  # which runtime reports a tick takes in
        self.decider = Decider(
            self.context,
            observer=self.observer,
            wake=self.wake,
            carry=lambda entries: self.outbox.run_entries(entries),  # built next: it decides here
        )
        self.outbox = OutboxRunner(
            self.context,
            carry_out=carry_out,
            decide=self.decider.decide,
            written=self.decider.written,
        )
        self.metering = MeteringPass(self.context, self.decider)
        self.ticker = Ticker(
            self.context,
            decider=self.decider,
            observer=self.observer,
            outbox=self.outbox,
            metering=self.metering,
        )
        self.views = Views(self.context, leader_view=self.decider.view)
        self.clusters = ClusterService(
            store=store,
            ids=ids,
            pools=self.pools,
            catalog=catalog,
            scheduler=lambda: self.config.scheduler,  # the config changes at run time
            decide=self.decider.decide,
            whole_host_nodes=lambda: self.config.whole_host_nodes,
            risk=lambda: self.snapshot().risk,
        )

        self.volume_service = VolumeService(
            store=store, decide=self.decider.decide_and_write, known=self.decider.known_volumes
        )

    # What the parts share (`self.context`) ------------------------------------------------------

    @property
    def store(self) -> Store:
        return self.context.store

    @store.setter
    def store(self, store: Store) -> None:
        self.context.store = store

    @property
    def runtime(self) -> Runtime:
        return self.context.runtime

    @runtime.setter
    def runtime(self, runtime: Runtime) -> None:
        self.context.runtime = runtime

    @property
    def clock(self) -> Clock:
        return self.context.clock

    @clock.setter
    def clock(self, clock: Clock) -> None:
        self.context.clock = clock

    @property
    def hosts(self) -> list[Host]:
        return self.context.hosts

    @hosts.setter
    def hosts(self, hosts: list[Host]) -> None:
        self.context.hosts = hosts

    @property
    def catalog(self) -> Catalog:
        return self.context.catalog

    @catalog.setter
    def catalog(self, catalog: Catalog) -> None:
        self.context.catalog = catalog

    @property
    def config(self) -> PlaneConfig:
        return self.context.config

    @config.setter
    def config(self, config: PlaneConfig) -> None:
        self.context.config = config

    @property
    def standby(self) -> bool:
        """A standby server (another holds the store's lead) decides nothing (`PlaneContext`)."""
        return self.context.standby

    @standby.setter
    def standby(self, standby: bool) -> None:
        self.context.standby = standby

    # bench/plane.py reads these by their names before the split: it is also run against older
    # trees (docs/performance.md), so it cannot look for them in `self.decider` alone.

    @property
    def _meter(self) -> Meter | None:
        return self.decider.meter

    @property
    def _batcher(self) -> CommitBatcher[Decided]:
        return self.decider.batcher

    # The live state and its views ----------------------------------------------------------------

    def reload(self) -> None:
        """Forget the live state (a lead gained or lost): the next decision loads it again."""
        self.decider.reload()

    def snapshot(self) -> EngineState:
        """The engine state as readers see it (`Views.snapshot`)."""
        return self.views.snapshot()

    def interruption(self, instance_id: str) -> dict[str, Any] | None:
        """The metadata endpoint's answer for a workload: its notice, or None (404)."""
        return self.views.interruption(instance_id)

    # Requests ----------------------------------------------------------------------------------

    def launch(self, request: LaunchRequest) -> StoredInstance:
        instance_id = self.ids.new_id("i")
        spec, record = build_launch(request, instance_id, self.catalog, self.pools, self.volumes)

        def decide(state: EngineState, now: Timestamp) -> Decision:
            known = self.decider.known_volumes()
            attached, extra = launched_on(known, record, now)  # refused first
            step = engine.launch(state, spec, now, self.config.scheduler)
            return Decision(step, {instance_id: stamped(attached, now)}, extra)

        try:
            commit = self.decider.decide_and_write(decide, batched=True)
        except InsufficientCapacity:
            self.decider.hold_for(spec.pool, spec.gpus, spec.account_id)
            raise
        return written_instance(commit, instance_id, None)

    def stop(self, instance_id: str) -> StoredInstance:
        return self._user(instance_id, StopRequested())

    def resume(self, instance_id: str) -> StoredInstance:
        return self._user(instance_id, ResumeRequested())

    def delete(self, instance_id: str) -> StoredInstance:
        return self._user(instance_id, DeleteRequested())

    def report_checkpoint(
        self,
        instance_id: str,
        step: int,
        *,
        save_s: int | None = None,
        saves_on_notice: bool = False,
    ) -> StoredInstance:
        """A durable checkpoint, with what the workload says of its saves (`CheckpointReported`):
        victim choice charges a believed saver its save time."""
        before = self.store.instance(instance_id)  # NotFound before anything else
        stored = self._reported(before, CheckpointReported(step, save_s, saves_on_notice))
        with self.decider.lock:  # requests report at once: the intervals are shared
            self.checkpoint_ages.learn(before.state, stored.state)
            self.config = replace(
                self.config, scheduler=self.checkpoint_ages.applied(self.config.scheduler)
            )
        return stored

    def report_complete(self, instance_id: str, step: int | None) -> StoredInstance:
        return self._user(instance_id, CompletionReported(step))

    def _user(self, instance_id: str, event: LifecycleEvent) -> StoredInstance:
        return self._reported(self.store.instance(instance_id), event)  # NotFound first

    def _reported(self, stored: StoredInstance, event: LifecycleEvent) -> StoredInstance:
        instance_id = stored.state.id

        def decide(state: EngineState, now: Timestamp) -> Decision:
            step = engine.report(state, instance_id, event, now, self.config.scheduler)
            inst = step.state.instances.get(instance_id) if reports_a_step(event) else None
            known = self.decider.known_volumes()
            return Decision(step, extra=checkpoint_held(known, stored.launch, inst))

        commit = self.decider.decide_and_write(decide, adopt=instance_id)
        return written_instance(commit, instance_id, stored)

    # The loop's tick -----------------------------------------------------------------------------

    def tick(self) -> Timestamp | None:
        """The loop's tick: a decision step, then a metering pass if an interval closed."""
        return self.ticker.tick()

    def step(self) -> Timestamp | None:
        """The tick's decision step (`Ticker.step`), without the metering pass."""
        return self.ticker.step()

    def meter_if_due(self) -> None:
        """A metering pass if an interval has closed (`MeteringPass.meter_if_due`)."""
        self.metering.meter_if_due()

    def run_outbox(self) -> None:
        """Carry out the effects still pending and due (`OutboxRunner.run_outbox`)."""
        self.outbox.run_outbox()
