"""The records of the store port: what a commit writes and what the store's reads return.

`ports.store` is the `Store` protocol: what a store does. These frozen dataclasses are what it is
handed and hands back (a `Commit` and its writes, the stored instance, cluster and node with their
versions, the account, key, ledger and volume records). They are kept apart from the protocol:
many of the modules that build or read them (the adapters' row mappings, the app's decisions, the
tests) never call a store, and the protocol with its documented reads is a module's worth alone.
The records a store shares with the webhooks are below both, in `ports.records`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Literal

from lowcostgpu.core.clusters import ClusterState
from lowcostgpu.core.lifecycle import InstanceState
from lowcostgpu.core.metering import MeterKey, UsageRecord
from lowcostgpu.core.nodes import NodeState
from lowcostgpu.domain.capacity import Timestamp
from lowcostgpu.ports.records import EventRecord, WebhookChanges


@dataclass(frozen=True, slots=True)
class LaunchRecord:
    """What the user asked for at launch; immutable afterwards."""

    instance_id: str
    account_id: str
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    template: str | None = None
    volume_name: str | None = None
    volume_size_gb: int | None = None
    token_hash: str = ""  # the instance's metadata token, hashed
    created_at: Timestamp = 0


@dataclass(frozen=True, slots=True)
class StoredInstance:
    state: InstanceState
    launch: LaunchRecord
    version: int


@dataclass(frozen=True, slots=True)
class InstanceWrite:
    state: InstanceState
    expected_version: int | None  # None: a new instance
    launch: LaunchRecord | None = None  # required for a new instance


@dataclass(frozen=True, slots=True)
class OutboxEntry:
    """An effect to carry out. `key` makes it idempotent; `kind` and `payload` say what it is.

    `attempts`, `next_attempt_at` and `last_error` are its retry state (`core.retries`): the
    failed attempts so far, when it is due again (0: at once) and why the last one failed."""

    key: str
    kind: str
    payload: Mapping[str, Any]
    created_at: Timestamp
    attempts: int = 0
    next_attempt_at: Timestamp = 0
    last_error: str = ""


@dataclass(frozen=True, slots=True)
class OutboxFailure:
    """A failed attempt at a pending entry, to be written on it: its attempts so far (this one
    included), when it is due again, and why it failed."""

    key: str
    attempts: int
    next_attempt_at: Timestamp
    error: str


VolumeSegment = tuple[Timestamp, Timestamp, int]
"""(start, end, size_gb): a closed stretch of a volume's life at one size (what it was billed)."""


@dataclass(frozen=True, slots=True)
class VolumeRecord:
    """A volume of an account, by name. `size_gb` is its size since `size_since` (a resize, or
    its creation); `history` keeps the earlier sizes it was billed at (and the life of a volume
    of the same name deleted before this one was made), so that storage is billed at the size
    of each moment. `checkpoint_step`: the last step a workload on it reported (None: none)."""

    account_id: str
    name: str
    size_gb: int
    created_at: Timestamp
    deleted_at: Timestamp | None = None
    history: tuple[VolumeSegment, ...] = ()
    checkpoint_step: int | None = None

    @property
    def size_since(self) -> Timestamp:
        """When the current size began: the last resize, or the creation."""
        return max(self.created_at, self.history[-1][1]) if self.history else self.created_at


@dataclass(frozen=True, slots=True)
class AccountRecord:
    """A customer: owns instances, volumes, keys and one prepaid balance."""

    id: str
    name: str
    created_at: Timestamp


@dataclass(frozen=True, slots=True)
class ApiKeyRecord:
    """An API key as stored: only its SHA-256 (the key itself is shown once, at creation).

    `account_id` is None for an admin key (it manages accounts, it owns nothing). `prefix` is the
    key's first characters, kept to tell keys apart in listings without revealing them.
    """

    key_hash: str
    account_id: str | None
    prefix: str
    created_at: Timestamp


LedgerKind = Literal["topup", "charge", "credit"]


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    """A movement of an account's prepaid balance; the balance is the sum of its entries.

    Inserted unless `key` exists, never updated: a usage record's charge is keyed by the record,
    so it is taken once however often the commit that carries it is replayed. `amount` is signed
    (a top-up or a lost-work credit positive, a charge negative) and exact.
    """

    key: str
    account_id: str
    at: Timestamp
    kind: LedgerKind
    amount: Decimal
    memo: str = ""


@dataclass(frozen=True, slots=True)
class StoredCluster:
    state: ClusterState
    version: int


@dataclass(frozen=True, slots=True)
class ClusterWrite:
    """Written only if the stored version is still `expected_version` (None: a new cluster)."""

    state: ClusterState
    expected_version: int | None


@dataclass(frozen=True, slots=True)
class StoredNode:
    state: NodeState
    version: int


@dataclass(frozen=True, slots=True)
class NodeWrite:
    """Written only if the stored version is still `expected_version` (None: a new node)."""

    state: NodeState
    expected_version: int | None


@dataclass(frozen=True, slots=True)
class Commit:
    instances: Sequence[InstanceWrite] = ()
    outbox: Sequence[OutboxEntry] = ()
    events: Sequence[EventRecord] = ()
    usage: Sequence[UsageRecord] = ()  # inserted unless (subject, kind, interval) exists
    metered_through: Mapping[MeterKey, Timestamp] = field(default_factory=dict)
    volumes: Sequence[VolumeRecord] = ()  # upserted by (account_id, name)
    accounts: Sequence[AccountRecord] = ()  # inserted; an existing id is a `Conflict`
    api_keys: Sequence[ApiKeyRecord] = ()  # inserted unless the hash exists
    ledger: Sequence[LedgerEntry] = ()  # inserted unless the key exists
    clusters: Sequence[ClusterWrite] = ()  # versioned like instances
    nodes: Sequence[NodeWrite] = ()  # versioned like instances
    webhooks: WebhookChanges = field(default_factory=WebhookChanges)  # events fan out to these
