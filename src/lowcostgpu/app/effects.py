"""Carrying out effects from the outbox: start, signal, kill; a volume's delete and resize. Each
is idempotent by its key (and the runtime's volumes make a second delete or resize a no-op).

Whatever one entry raises is that entry's failure (`Outcome.failed`): the others are carried out
all the same, and the plane writes the failure on the entry and retries it (`core.retries`).

A drain's SIGTERM is recorded with the time it was really sent (`Outcome.signalled`): the plane
stamps the drain's deadline from it (`core.drain.signal_stamp`), so the workload's grace counts
from the signal it received, however late the effect ran.
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lowcostgpu.app.tokens import Tokens
from lowcostgpu.core.effects import NODE_EFFECT_KINDS
from lowcostgpu.core.instance_state import InstanceState
from lowcostgpu.core.lifecycle import SignalSent
from lowcostgpu.core.retries import FailureKind, RetryPolicy, Verdict, after_failure
from lowcostgpu.core.snapshot import MEMBER_MARK
from lowcostgpu.domain.capacity import Timestamp
from lowcostgpu.domain.errors import LowcostgpuError, Unavailable
from lowcostgpu.domain.status import InstanceStatus
from lowcostgpu.ports.clock import Clock
from lowcostgpu.ports.nodes import NodeProvider
from lowcostgpu.ports.runtime import Runtime, Volumes, WorkloadStart
from lowcostgpu.ports.store import Store
from lowcostgpu.ports.store_records import OutboxEntry, OutboxFailure

log = logging.getLogger(__name__)

# Effects with nothing to do here: the store already holds their outcome (ReleaseAllocation:
# the GPUs are free in the instance's state; exited workloads are forgotten by the loop).
# Node effects (`core.effects.NodeEffect`) go to the node provider (`nodes`, injected: the local
# runtime's `adapters.local.PlaceholderNodes`, or Kubernetes' `KubernetesNodes`).
NOTHING_TO_DO = frozenset({"ReleaseAllocation", "EmitEvent"})


ERROR_TEXT_CHARS = 500  # what is kept of an error's text on its entry and in a failure reason


@dataclass(frozen=True, slots=True)
class Failure:
    """An entry whose effect raised: why (`error`, fit to show its owner), what kind of failure
    (`core.retries`), and the exception itself (for the log)."""

    entry: OutboxEntry
    error: str
    kind: FailureKind
    exc: Exception


@dataclass
class Outcome:
    """What a run carried out: the keys done, the failures, and the SIGTERMs sent (subject id
    and `SignalSent`, the time read once the signal was out: never before it)."""

    done: list[str] = field(default_factory=list)
    failed: list[Failure] = field(default_factory=list)
    signalled: list[tuple[str, SignalSent]] = field(default_factory=list)


def failure_kind(exc: Exception) -> FailureKind:
    """A runtime that cannot be reached (`Unavailable`) fails nothing for good; any other error
    of ours means the effect itself was refused; anything else may pass."""
    if isinstance(exc, Unavailable):
        return "unavailable"
    return "permanent" if isinstance(exc, LowcostgpuError) else "transient"


def error_text(exc: Exception) -> str:
    """Why an effect failed, in words its owner may read: our errors say it themselves; an
    `OSError` says what failed without the server's paths; others name their type."""
    if isinstance(exc, LowcostgpuError):
        text = str(exc)
    elif isinstance(exc, OSError) and exc.strerror:
        errno = f" (errno {exc.errno})" if exc.errno is not None else ""
        text = f"{type(exc).__name__}: {exc.strerror}{errno}"
    else:
        text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    # Printable only: a NUL cannot be stored (PostgreSQL), a newline would forge a log line.
    return "".join(c if c.isprintable() else "?" for c in text[:ERROR_TEXT_CHARS])


@dataclass
class Settled:
    """What follows from an outcome's failures: what to write on their entries, and the entries
    given up (with their verdicts), to act on before they are marked done."""

    failures: list[OutboxFailure] = field(default_factory=list)
    given_up: list[tuple[Failure, Verdict]] = field(default_factory=list)


def settled(failed: Sequence[Failure], now: Timestamp, policy: RetryPolicy) -> Settled:
    """The verdict on each failure (`core.retries`), logged once: a traceback only at the first
    attempt of an error we did not raise ourselves (a bug, or an I/O error), a line after that."""
    out = Settled()
    for f in failed:
        verdict = after_failure(f.entry.attempts, f.kind, now, policy)
        out.failures.append(
            OutboxFailure(f.entry.key, verdict.attempts, verdict.next_attempt_at, f.error)
        )
        trace = f.exc if verdict.attempts == 1 and f.kind == "transient" else None
        if verdict.gave_up:
            out.given_up.append((f, verdict))
            words = "effect %s (%s) given up after %d attempt(s): %s"
            log.error(words, f.entry.key, f.entry.kind, verdict.attempts, f.error, exc_info=trace)
        else:
            words = "effect %s (%s) failed (attempt %d), retried in %d s: %s"
            wait_s = verdict.next_attempt_at - now
            log.warning(
                words, f.entry.key, f.entry.kind, verdict.attempts, wait_s, f.error, exc_info=trace
            )
    return out


GANG_PORTS = (29400, 9000)  # a gang's rendezvous port: first, and how many to spread over


def gang_of(allocation_id: str) -> str:
    """The gang a member's allocation belongs to: its run's rank-0 allocation id."""
    return allocation_id.partition(MEMBER_MARK)[0]


def gang_master_port(gang_id: str) -> int:
    """The rank-0 port of a gang's run, the same for every member (they start independently):
    from the run's rank-0 allocation id, so a requeued run gets another one."""
    first, spread = GANG_PORTS
    return first + zlib.crc32(gang_id.encode()) % spread


def start_applies(entry: OutboxEntry, instance: InstanceState | None) -> bool:
    """Whether a start still applies: its instance is still starting on that allocation. One
    that was stopped, deleted or placed again meanwhile drops it (nothing else follows from a
    start; signals and kills always apply: ending a workload is always right)."""
    if entry.kind != "StartWorkload":
        return True
    return (
        instance is not None
        and instance.status is InstanceStatus.STARTING
        and instance.rank_of(str(entry.payload.get("allocation_id"))) is not None
        and instance.launched
    )


def give_up_reason(failure: Failure, verdict: Verdict) -> str:
    """The reason a given-up start fails its instance with."""
    if failure.kind == "permanent":
        return failure.error
    return f"{failure.error} (gave up after {verdict.attempts} attempts)"


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
        clock: Clock | None = None,
    ) -> None:
        """`clock`: when a SIGTERM was sent (`Outcome.signalled`); without one, no drain is
        stamped and each keeps the deadline of its decision."""
        self.store = store
        self.clock = clock
        self.runtime = runtime
        self.volumes = volumes
        self.tokens = tokens
        self.metadata_url = metadata_url
        self.nodes = nodes

    def run(self, entries: Sequence[OutboxEntry]) -> Outcome:
        """Carry out each entry; one that raises (any `Exception`) is a `Failure` and stops
        nothing else. Interrupts (`KeyboardInterrupt`, `SystemExit`) still stop the server."""
        outcome = Outcome()
        for entry in entries:
            try:
                self._one(entry)
            except Exception as exc:  # one entry's error, of any type, is its own
                outcome.failed.append(Failure(entry, error_text(exc), failure_kind(exc), exc))
            else:
                outcome.done.append(entry.key)
                if entry.kind == "SignalWorkload" and self.clock is not None:
                    p = entry.payload
                    sent = SignalSent(str(p["allocation_id"]), self.clock.now())
                    outcome.signalled.append((str(p["subject_id"]), sent))
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
            case "DeleteVolume":
                if self._still_deleted(entry):
                    self.volumes.delete(str(p["account_id"]), str(p["name"]))
            case "ResizeVolume":
                self.volumes.resize(str(p["account_id"]), str(p["name"]), int(p["size_gb"]))
            case kind if kind in NODE_EFFECT_KINDS:
                self.nodes.carry_out(entry, self.runtime)
            case kind if kind in NOTHING_TO_DO:
                pass
            case kind:
                log.error("unknown effect kind %s in the outbox (key %s): skipped", kind, entry.key)

    def _still_deleted(self, entry: OutboxEntry) -> bool:
        """Whether a volume's delete still applies: a delete retried after a launch made a new
        volume of that name must not remove the new one's data under its run."""
        p = entry.payload
        v = self.store.volume(str(p["account_id"]), str(p["name"]))
        return v is None or v.deleted_at == p.get("deleted_at", v.deleted_at)

    def _gang_env(self, p: Mapping[str, Any]) -> dict[str, str]:
        """A gang member's place in its gang (DESIGN.md's workload contract, multi-node), with
        the variables `torchrun --nnodes` reads; nothing for a single-host instance."""
        nodes = int(p.get("nodes", 1))
        if nodes == 1:
            return {}
        master, gang_id = str(p["master_host_id"]), gang_of(str(p["allocation_id"]))
        address_of = getattr(self.runtime, "gang_address", None)  # `ports.runtime.GangAddresses`
        addr = master if address_of is None else str(address_of(gang_id, master))
        port = str(gang_master_port(gang_id))
        rank = str(p["rank"])
        return {
            "LOWCOSTGPU_NODE_RANK": rank,
            "LOWCOSTGPU_NUM_NODES": str(nodes),
            "LOWCOSTGPU_MASTER_ADDR": addr,
            "LOWCOSTGPU_MASTER_PORT": port,
            "MASTER_ADDR": addr,
            "MASTER_PORT": port,
            "NODE_RANK": rank,
            "WORLD_SIZE": str(nodes),
        }

    def _start_of(self, entry: OutboxEntry) -> WorkloadStart:
        p = entry.payload
        stored = self.store.instance(str(p["subject_id"]))
        launch, state = stored.launch, stored.state
        volume = None
        if launch.volume_name:
            volume = self.volumes.ensure(
                launch.account_id,
                launch.volume_name,
                launch.volume_size_gb or 1,
                region=state.pool.region,  # where the run is: a claim lives in one cluster
            )
        env = {
            **launch.env,
            "LOWCOSTGPU_INSTANCE_ID": state.id,
            "LOWCOSTGPU_RESTART_COUNT": str(p["restart_count"]),
            "LOWCOSTGPU_GRACE_PERIOD_S": str(state.grace_period_s),
            "LOWCOSTGPU_METADATA_URL": self.metadata_url,
            "LOWCOSTGPU_TOKEN": self.tokens.mint(state.id, str(p["allocation_id"])),
            **self._gang_env(p),
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
            rank=int(p.get("rank", 0)),
            nodes=int(p.get("nodes", 1)),
            gang_id=gang_of(str(p["allocation_id"])) if int(p.get("nodes", 1)) > 1 else "",
        )
