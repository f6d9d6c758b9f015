"""Carrying out effects from the outbox: start, signal, kill. Each is idempotent by its key."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from lowcostgpu.app.tokens import Tokens
from lowcostgpu.core.effects import NODE_EFFECT_KINDS
from lowcostgpu.domain.errors import LowcostgpuError, Unavailable
from lowcostgpu.ports.nodes import NodeProvider
from lowcostgpu.ports.runtime import Runtime, Volumes, WorkloadStart
from lowcostgpu.ports.store import OutboxEntry, Store

log = logging.getLogger(__name__)

# Effects with nothing to do here: the store already holds their outcome (ReleaseAllocation:
# the GPUs are free in the instance's state; exited workloads are forgotten by the loop).
# Node effects (`core.effects.NodeEffect`) go to the node provider (`nodes`, injected: the local
# runtime's `adapters.local.PlaceholderNodes`, or Kubernetes' `KubernetesNodes`).
NOTHING_TO_DO = frozenset({"ReleaseAllocation", "EmitEvent"})


@dataclass
class Outcome:
    done: list[str] = field(default_factory=list)
    failed_starts: list[tuple[str, str]] = field(default_factory=list)  # (instance id, why)


class EffectRunner:
    def __init__(
        self,
        *,
        store: Store,
        runtime: Runtime,
        volumes: Volumes,
        tokens: Tokens,
        metadata_url: str,
        nodes: NodeProvider,
    ) -> None:
        self.store = store
        self.runtime = runtime
        self.volumes = volumes
        self.tokens = tokens
        self.metadata_url = metadata_url
        self.nodes = nodes

    def run(self, entries: Sequence[OutboxEntry]) -> Outcome:
        outcome = Outcome()
        for entry in entries:
            try:
                self._one(entry)
            except LowcostgpuError as exc:
                # A runtime that cannot be reached now (Unavailable) fails no start: retried.
                if entry.kind != "StartWorkload" or isinstance(exc, Unavailable):
                    log.warning("effect %s failed, will retry: %s", entry.key, exc)
                    continue
                outcome.failed_starts.append((str(entry.payload["subject_id"]), str(exc)))
            outcome.done.append(entry.key)
        return outcome

    def _one(self, entry: OutboxEntry) -> None:
        p = entry.payload
        match entry.kind:
            case "StartWorkload":
                self.runtime.start(self._start_of(entry))
            case "SignalWorkload":
                self.runtime.signal(str(p["allocation_id"]), "SIGTERM")
            case "KillWorkload":
                self.runtime.kill(str(p["allocation_id"]))
            case kind if kind in NODE_EFFECT_KINDS:
                self.nodes.carry_out(entry, self.runtime)
            case kind if kind in NOTHING_TO_DO:
                pass
            case kind:
                log.error("unknown effect kind %s in the outbox (key %s): skipped", kind, entry.key)

    def _start_of(self, entry: OutboxEntry) -> WorkloadStart:
        p = entry.payload
        stored = self.store.instance(str(p["subject_id"]))
        launch, state = stored.launch, stored.state
        volume = None
        if launch.volume_name:
            volume = self.volumes.ensure(
                launch.account_id, launch.volume_name, launch.volume_size_gb or 1
            )
        env = {
            **launch.env,
            "LOWCOSTGPU_INSTANCE_ID": state.id,
            "LOWCOSTGPU_RESTART_COUNT": str(p["restart_count"]),
            "LOWCOSTGPU_GRACE_PERIOD_S": str(state.grace_period_s),
            "LOWCOSTGPU_METADATA_URL": self.metadata_url,
            "LOWCOSTGPU_TOKEN": self.tokens.mint(state.id, str(p["allocation_id"])),
        }
        return WorkloadStart(
            instance_id=state.id,
            allocation_id=str(p["allocation_id"]),
            host_id=str(p["host_id"]),
            gpu_indices=tuple(int(i) for i in p["gpu_indices"]),
            restart_count=int(p["restart_count"]),
            argv=launch.argv,
            env=env,
            volume=volume,
            grace_period_s=state.grace_period_s,
            account_id=launch.account_id,
        )
