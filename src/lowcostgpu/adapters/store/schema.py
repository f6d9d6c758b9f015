"""The store's tables (SQLAlchemy Core). Alembic creates them; this module only describes them.

One table per kind of record of the `Store` port, and the balances kept beside the ledger. Text
columns have no length limit (so SQLite and PostgreSQL accept the same values). Timestamps are
integer seconds since the epoch (the core's `Timestamp`), never database clock values: the store
never reads the time.

- instances: the lifecycle state as JSON (see `codec`), its launch record, and the version that
  optimistic concurrency checks. `account_id`, `status` and the launch's `created_at` (migration
  0008) are copied out of the JSON for queries. Partial indexes cover the instances that are not
  deleted (`ix_instances_live`: what `instances()` returns) and the live ones
  (`ix_instances_active`, 0008: what `live_instances()` returns); `ix_instances_account_created`
  (account_id, created_at, id; 0008) gives one account's instances in page order
  (`instances_page()`), `ix_instances_account_id` (0012) an account's ids by prefix. The
  launch's `volume_name` (0012; NULL: none) is copied out too, and the partial index
  `ix_instances_account_volume` (account_id, volume_name, id) of the instances that are not
  deleted and name a volume gives a volume's users (`instances_naming_volume()`).
- outbox: effects to carry out; `position` is the insertion order, `done_at` NULL while pending.
  Each entry keeps its retry state (migration 0009): `attempts`, `next_attempt_at` (0: due at
  once) and `last_error`. A partial index of the pending ones on (next_attempt_at, position)
  finds those that are due, however long the history grows and however many wait for a retry.
- events: append-only; `seq` is assigned by the store, strictly increasing in commit order;
  `key` deduplicates an event written twice after a crash. Indexed by (account, seq) for one
  account's reads, by `at` for time windows (`Store.events(since=, until=)`, migration 0006), and
  by (account, object, seq) for one object's (`Store.events(object_id=)`, migration 0007).
- usage: one row per (subject, kind, interval); inserted once, never updated. Indexed by
  (account, interval start) and by interval start (the fleet's windows, migration 0013).
- usage_totals (migration 0013): each account's quantity per kind, resource and class, added to
  in the transaction that inserts the records.
- metered_through: per (subject, kind), up to when usage is in the table.
- volumes: per (account, name); earlier sizes (`history`, JSON) and the last checkpoint step
  a workload on it reported (migration 0011).
- accounts, api_keys (SHA-256 of the key, never the key), ledger (balance movements as exact
  decimal text, inserted once by key; a balance is the sum of its account's entries).
- account_balances (migration 0006): that sum per account, as exact decimal text, updated in the
  transaction that inserts the account's ledger entries, so a balance is read without scanning
  the ledger (which grows by a row per metered record).

`tests/adapters/store` checks that the migrations produce exactly these tables.
"""

from __future__ import annotations

import sqlalchemy as sa

from lowcostgpu.domain.status import LIVE_INSTANCE_STATUSES

# SQLite autoincrements only an INTEGER PRIMARY KEY (a BIGINT one is not a rowid alias).
BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

metadata = sa.MetaData()

# The live statuses as SQL (`LIVE_INSTANCE_STATUSES`, sorted): the predicate of the partial index
# `ix_instances_active`, and the very text `Store.live_instances()` filters by, so that the
# planners (SQLite's above all) see that the index covers the query.
ACTIVE_PREDICATE = "status IN ({})".format(
    ", ".join(f"'{s.value}'" for s in sorted(LIVE_INSTANCE_STATUSES))
)

# The predicate of the partial index `ix_instances_account_volume`, and the very text
# `Store.instances_naming_volume()` filters by (a bound parameter would not prove to SQLite's
# planner that the index covers the query).
NAMING_A_VOLUME = "status <> 'deleted' AND volume_name IS NOT NULL"

instances = sa.Table(
    "instances",
    metadata,
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("account_id", sa.Text, nullable=False),
    sa.Column("status", sa.Text, nullable=False),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("state", sa.Text, nullable=False),
    sa.Column("launch", sa.Text, nullable=False),
    # The launch record's created_at (migration 0008; its upgrade filled the older rows).
    sa.Column("created_at", sa.BigInteger, nullable=False, server_default="0"),
    # The launch record's volume_name, NULL if it names none (migration 0012 filled older rows).
    sa.Column("volume_name", sa.Text, nullable=True),
    sa.Index(
        "ix_instances_live",
        "id",
        sqlite_where=sa.text("status <> 'deleted'"),
        postgresql_where=sa.text("status <> 'deleted'"),
    ),
    sa.Index(
        "ix_instances_active",
        "id",
        sqlite_where=sa.text(ACTIVE_PREDICATE),
        postgresql_where=sa.text(ACTIVE_PREDICATE),
    ),
    sa.Index("ix_instances_account_created", "account_id", "created_at", "id"),
    sa.Index("ix_instances_account_id", "account_id", "id"),  # short ids (migration 0012)
    sa.Index(  # a volume's users (migration 0012)
        "ix_instances_account_volume",
        "account_id",
        "volume_name",
        "id",
        sqlite_where=sa.text(NAMING_A_VOLUME),
        postgresql_where=sa.text(NAMING_A_VOLUME),
    ),
)

outbox = sa.Table(
    "outbox",
    metadata,
    sa.Column("position", BigId, primary_key=True, autoincrement=True),
    sa.Column("key", sa.Text, nullable=False, unique=True),
    sa.Column("kind", sa.Text, nullable=False),
    sa.Column("payload", sa.Text, nullable=False),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False),
    sa.Column("done_at", sa.BigInteger, nullable=True),
    # The retry state of a failed effect (migration 0009).
    sa.Column("next_attempt_at", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("last_error", sa.Text, nullable=False, server_default=""),
    sa.Index(
        "ix_outbox_due",
        "next_attempt_at",
        "position",
        sqlite_where=sa.text("done_at IS NULL"),
        postgresql_where=sa.text("done_at IS NULL"),
    ),
)

events = sa.Table(
    "events",
    metadata,
    sa.Column("seq", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("key", sa.Text, nullable=False, unique=True),
    sa.Column("at", sa.BigInteger, nullable=False),
    sa.Column("account_id", sa.Text, nullable=False),
    sa.Column("object_kind", sa.Text, nullable=False),
    sa.Column("object_id", sa.Text, nullable=False),
    sa.Column("type", sa.Text, nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("message", sa.Text, nullable=False),
    sa.Column("data", sa.Text, nullable=False),
    sa.Index("ix_events_account_seq", "account_id", "seq"),
    sa.Index("ix_events_at", "at"),
    sa.Index("ix_events_account_object", "account_id", "object_id", "seq"),
)

usage = sa.Table(
    "usage",
    metadata,
    sa.Column("subject_id", sa.Text, primary_key=True),
    sa.Column("kind", sa.Text, primary_key=True),
    sa.Column("interval_start", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("account_id", sa.Text, nullable=False),
    sa.Column("resource", sa.Text, nullable=False),
    sa.Column("capacity_class", sa.Text, nullable=True),
    sa.Column("interval_end", sa.BigInteger, nullable=False),
    sa.Column("seconds", sa.BigInteger, nullable=False),
    sa.Column("quantity", sa.BigInteger, nullable=False),
    sa.Column("quantity_s", sa.BigInteger, nullable=False),
    sa.Index("ix_usage_account_interval", "account_id", "interval_start"),
    sa.Index("ix_usage_interval", "interval_start"),  # the fleet's window (migration 0013)
)

metered_through = sa.Table(
    "metered_through",
    metadata,
    sa.Column("subject_id", sa.Text, primary_key=True),
    sa.Column("kind", sa.Text, primary_key=True),
    sa.Column("through", sa.BigInteger, nullable=False),
)

volumes = sa.Table(
    "volumes",
    metadata,
    sa.Column("account_id", sa.Text, primary_key=True),
    sa.Column("name", sa.Text, primary_key=True),
    sa.Column("size_gb", sa.Integer, nullable=False),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.Column("deleted_at", sa.BigInteger, nullable=True),
    # Earlier sizes as JSON [[start, end, size_gb], ...] and the last checkpoint step (0011).
    sa.Column("history", sa.Text, nullable=False, server_default="[]"),
    sa.Column("checkpoint_step", sa.BigInteger, nullable=True),
)

accounts = sa.Table(
    "accounts",
    metadata,
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("created_at", sa.BigInteger, nullable=False),
)

api_keys = sa.Table(
    "api_keys",
    metadata,
    sa.Column("key_hash", sa.Text, primary_key=True),
    sa.Column("account_id", sa.Text, nullable=True),
    sa.Column("prefix", sa.Text, nullable=False),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.Index("ix_api_keys_account", "account_id"),
)

ledger = sa.Table(
    "ledger",
    metadata,
    sa.Column("key", sa.Text, primary_key=True),
    sa.Column("account_id", sa.Text, nullable=False),
    sa.Column("at", sa.BigInteger, nullable=False),
    sa.Column("kind", sa.Text, nullable=False),
    sa.Column("amount", sa.Text, nullable=False),
    sa.Column("memo", sa.Text, nullable=False),
    sa.Index("ix_ledger_account_at", "account_id", "at"),
)

# Each account's billed quantity per kind, resource and capacity class ('' for none), added to in
# the transaction that inserts the usage records (migration 0013): all-time totals in O(lines).
usage_totals = sa.Table(
    "usage_totals",
    metadata,
    sa.Column("account_id", sa.Text, primary_key=True),
    sa.Column("kind", sa.Text, primary_key=True),
    sa.Column("resource", sa.Text, primary_key=True),
    sa.Column("capacity_class", sa.Text, primary_key=True),
    sa.Column("quantity_s", sa.BigInteger, nullable=False),
)

# The balance of each account that has ledger entries (migration 0006): the exact sum of them.
account_balances = sa.Table(
    "account_balances",
    metadata,
    sa.Column("account_id", sa.Text, primary_key=True),
    sa.Column("balance", sa.Text, nullable=False),
)

# Clusters and their nodes (migration 0003): the core's records as JSON, versioned like
# instances. Removed nodes and deleted clusters stay (history, billing); partial indexes cover
# the live ones, which are what every decision loads.
clusters = sa.Table(
    "clusters",
    metadata,
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("account_id", sa.Text, nullable=False),
    sa.Column("status", sa.Text, nullable=False),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("state", sa.Text, nullable=False),
    sa.Index(
        "ix_clusters_live",
        "id",
        sqlite_where=sa.text("status <> 'deleted'"),
        postgresql_where=sa.text("status <> 'deleted'"),
    ),
)

nodes = sa.Table(
    "nodes",
    metadata,
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("cluster_id", sa.Text, nullable=False),
    sa.Column("account_id", sa.Text, nullable=False),
    sa.Column("status", sa.Text, nullable=False),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("state", sa.Text, nullable=False),
    sa.Index("ix_nodes_cluster", "cluster_id"),
    sa.Index(
        "ix_nodes_live",
        "id",
        sqlite_where=sa.text("status <> 'removed'"),
        postgresql_where=sa.text("status <> 'removed'"),
    ),
)

# Webhooks (see `ports.webhooks`): each record as JSON in `state`, what queries need copied out.
webhook_endpoints = sa.Table(
    "webhook_endpoints",
    metadata,
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("account_id", sa.Text, nullable=False),
    sa.Column("status", sa.Text, nullable=False),
    sa.Column("state", sa.Text, nullable=False),
    sa.Index("ix_webhook_endpoints_account", "account_id"),
)

webhook_deliveries = sa.Table(
    "webhook_deliveries",
    metadata,
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("endpoint_id", sa.Text, nullable=False),
    sa.Column("status", sa.Text, nullable=False),
    sa.Column("seq", sa.BigInteger, nullable=False),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.Column("state", sa.Text, nullable=False),
    # Versioned writes (see `ports.webhooks`); the state's JSON does not carry it. Rows of 0004: 1.
    sa.Column("version", sa.Integer, nullable=False, server_default="1"),
    sa.Index("ix_webhook_deliveries_order", "endpoint_id", "seq", "created_at", "id"),
)

webhook_attempts = sa.Table(
    "webhook_attempts",
    metadata,
    sa.Column("delivery_id", sa.Text, primary_key=True),
    sa.Column("n", sa.Integer, primary_key=True),
    sa.Column("state", sa.Text, nullable=False),
)
