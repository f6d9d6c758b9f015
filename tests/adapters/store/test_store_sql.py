"""What only the SQL store has: URLs, the data directory, Alembic, locks across processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from decimal import Decimal
from pathlib import Path

import psycopg
import pytest
import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from store_support import PG_URL, Backend, launch, pg_schema, state

from lowcostgpu.adapters.store import SqlStore, StoreDataError, StoreUnavailable, codec
from lowcostgpu.adapters.store import engine as engine_module
from lowcostgpu.adapters.store.engine import parse_url
from lowcostgpu.adapters.store.migrate import alembic_config, current_revision, head_revision
from lowcostgpu.adapters.store.schema import metadata
from lowcostgpu.domain.errors import InvalidRequest
from lowcostgpu.domain.events import EventType, Reason
from lowcostgpu.ports.store import EventRecord
from lowcostgpu.ports.store_records import Commit, InstanceWrite, LedgerEntry
from lowcostgpu.ports.webhooks import WebhookChanges, WebhookDelivery
from waiting import wait_until


@pytest.mark.parametrize(
    ("url", "driver"),
    [
        ("postgresql://u:secret@db:5432/lcg", "postgresql+psycopg"),
        ("postgres://u@db/lcg", "postgresql+psycopg"),
        ("postgresql+psycopg://u@db/lcg", "postgresql+psycopg"),
        ("sqlite:////var/lib/lcg/store.db", "sqlite+pysqlite"),
    ],
)
def test_supported_urls_map_to_their_driver(url: str, driver: str) -> None:
    target = parse_url(url)
    assert target.url.drivername == driver
    assert "secret" not in target.shown


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("not a url", "not a database URL"),
        ("mysql://u@db/lcg", "unsupported database 'mysql'"),
        ("sqlite://", "names no database file"),
        ("sqlite:///:memory:", "names no database file"),
        ("postgresql://u@db", "no database named"),
    ],
)
def test_a_bad_url_is_an_invalid_request(url: str, message: str) -> None:
    with pytest.raises(InvalidRequest, match=message) as info:
        SqlStore.open(url)
    assert info.value.hint and "sqlite:///" in info.value.hint


def _bad_paths(tmp: Path) -> dict[str, tuple[Path, str]]:
    (tmp / "a-file").write_text("x")
    (tmp / "a-dir.db").mkdir()
    return {
        "missing directory": (tmp / "missing" / "store.db", "does not exist"),
        "directory is a file": (tmp / "a-file" / "store.db", "is not a directory"),
        "database is a directory": (tmp / "a-dir.db", "is not a file"),
    }


@pytest.mark.parametrize("case", ["missing directory", "directory is a file", "database is a dir"])
def test_a_bad_data_directory_fails_clearly_and_leaves_nothing(tmp_path: Path, case: str) -> None:
    key = "database is a directory" if case == "database is a dir" else case
    path, message = _bad_paths(tmp_path)[key]
    before = sorted(p.name for p in tmp_path.rglob("*"))
    with pytest.raises(StoreUnavailable, match=message) as info:
        SqlStore.open(f"sqlite:///{path}")
    assert info.value.hint
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes to read-only directories anyway")
def test_a_read_only_data_directory_fails_clearly(tmp_path: Path) -> None:
    tmp_path.chmod(0o500)
    try:
        with pytest.raises(StoreUnavailable, match="not writable"):
            SqlStore.open(f"sqlite:///{tmp_path / 'store.db'}")
        assert list(tmp_path.iterdir()) == []
    finally:
        tmp_path.chmod(0o700)


def test_a_file_that_is_not_a_database_is_refused_and_kept(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    path.write_bytes(b"not sqlite at all " * 300)
    with pytest.raises(StoreUnavailable, match="is not a SQLite database"):
        SqlStore.open(f"sqlite:///{path}")
    assert path.read_bytes() == b"not sqlite at all " * 300


def test_an_unreachable_server_is_a_clear_error() -> None:
    with pytest.raises(StoreUnavailable, match="cannot reach the database at postgresql"):
        SqlStore.open("postgresql://nobody:pw@127.0.0.1:1/test")


def _assert_schema_is_head(url: str) -> None:
    engine = sa.create_engine(parse_url(url).url)
    try:
        with engine.connect() as conn:
            diffs = compare_metadata(MigrationContext.configure(conn), metadata)
        assert diffs == []  # the migrations build exactly the tables of schema.py
        assert current_revision(engine) == head_revision() == "0013"
    finally:
        engine.dispose()


def test_sqlite_upgrade_on_an_empty_database_creates_the_schema(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    SqlStore.open(url).close()
    _assert_schema_is_head(url)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store.db"]  # WAL files gone at close


def test_postgresql_upgrade_on_an_empty_schema_creates_the_schema() -> None:
    with pg_schema() as url:
        SqlStore.open(url).close()
        _assert_schema_is_head(url)


@contextmanager
def _empty_database(dialect: str, directory: Path) -> Iterator[str]:
    if dialect == "sqlite":
        yield f"sqlite:///{directory / 'store.db'}"
    else:
        with pg_schema() as url:
            yield url


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql"])
def test_a_delivery_written_before_0005_is_at_version_1_after_it(
    dialect: str, tmp_path: Path
) -> None:
    """0005 gives deliveries a version (the column only, not the JSON, which 0004 reads too)."""
    with _empty_database(dialect, tmp_path) as url:
        engine = sa.create_engine(parse_url(url).url)
        d = WebhookDelivery("wh-1.1", "wh-1", "acct-1", "e1", 1, {"k": 1}, 100, 100)
        old_state = {k: v for k, v in codec.encode(d).items() if k != "version"}
        row = {"id": d.id, "endpoint_id": "wh-1", "status": "pending", "seq": 1, "created_at": 100}
        try:
            with engine.begin() as conn:
                command.upgrade(alembic_config(conn), "0004")
                insert = sa.text(
                    "INSERT INTO webhook_deliveries (id, endpoint_id, status, seq, created_at,"
                    " state) VALUES (:id, :endpoint_id, :status, :seq, :created_at, :state)"
                )
                conn.execute(insert, {**row, "state": json.dumps(old_state)})
            store = SqlStore.open(url)
            assert store.webhook_delivery(d.id) == replace(d, version=1)
            store.commit(Commit(webhooks=WebhookChanges(deliveries=(replace(d, version=1),))))
            assert store.webhook_delivery(d.id).version == 2
            store.close()
            with engine.connect() as conn:
                stored = conn.scalar(sa.text("SELECT state FROM webhook_deliveries"))
            assert json.loads(stored) == old_state
            with engine.begin() as conn:
                command.downgrade(alembic_config(conn), "0004")
            with engine.connect() as conn:
                columns = {c["name"] for c in sa.inspect(conn).get_columns("webhook_deliveries")}
            assert "version" not in columns
        finally:
            engine.dispose()


_LEDGER_AT_0005 = [  # key, account, amount: rows a 0005 database holds
    ("topup-1", "acct-1", "10"),
    ("charge-1", "acct-1", "-0.00400833333333333333"),
    ("charge-2", "acct-1", "-0.00400833333333333333"),
    ("topup-2", "acct-2", "0.1"),
    ("charge-3", "acct-2", "-0.10"),
]


def _balance_rows(engine: sa.Engine) -> dict[str, str]:
    with engine.connect() as conn:
        found = conn.execute(sa.text("SELECT account_id, balance FROM account_balances"))
        return {account: balance for account, balance in found}


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql"])
def test_0006_fills_the_balances_from_the_ledger_and_downgrades_cleanly(
    dialect: str, tmp_path: Path
) -> None:
    """A database at 0005 with ledger rows gets each account's exact sum (digits included), the
    store keeps adding to it; the downgrade drops the table and the index, the ledger stays."""
    with _empty_database(dialect, tmp_path) as url:
        engine = sa.create_engine(parse_url(url).url)
        insert = sa.text(
            "INSERT INTO ledger (key, account_id, at, kind, amount, memo)"
            " VALUES (:k, :a, 100, 'topup', :amount, '')"
        )
        try:
            with engine.begin() as conn:
                command.upgrade(alembic_config(conn), "0005")
                conn.execute(insert, [{"k": k, "a": a, "amount": m} for k, a, m in _LEDGER_AT_0005])
            store = SqlStore.open(url)
            assert _balance_rows(engine) == {"acct-1": "9.99198333333333333334", "acct-2": "0.00"}
            assert store.balances() == {
                "acct-1": Decimal("9.99198333333333333334"),
                "acct-2": Decimal(0),
            }
            again = LedgerEntry("charge-1", "acct-1", 100, "charge", Decimal("-5"))  # a duplicate
            new = LedgerEntry("charge-4", "acct-2", 200, "charge", Decimal("-0.5"))
            store.commit(Commit(ledger=[again, new]))
            assert store.balance("acct-1") == Decimal("9.99198333333333333334")
            assert store.balance("acct-2") == Decimal("-0.5")
            store.close()
            with engine.begin() as conn:
                command.downgrade(alembic_config(conn), "0005")
            assert current_revision(engine) == "0005"
            with engine.connect() as conn:
                inspector = sa.inspect(conn)
                assert "account_balances" not in inspector.get_table_names()
                indexes = {i["name"] for i in inspector.get_indexes("events")}
                assert "ix_events_at" not in indexes and "ix_events_account_seq" in indexes
                assert conn.scalar(sa.text("SELECT count(*) FROM ledger")) == 6
            SqlStore.open(url).close()  # up again: filled from the ledger as it is now
            assert _balance_rows(engine) == {"acct-1": "9.99198333333333333334", "acct-2": "-0.50"}
        finally:
            engine.dispose()


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql"])
def test_0007_indexes_the_events_by_object_and_downgrades_cleanly(
    dialect: str, tmp_path: Path
) -> None:
    """A database at 0006 with events gets `ix_events_account_object`; the store reads one
    object's events through it; the downgrade drops the index only, the events stay."""
    with _empty_database(dialect, tmp_path) as url:
        engine = sa.create_engine(parse_url(url).url)
        insert = sa.text(
            "INSERT INTO events (seq, key, at, account_id, object_kind, object_id, type, reason,"
            " message, data) VALUES (:seq, :key, 100, 'acct-1', 'instance', :oid, 'Normal',"
            " 'Queued', '', '{}')"
        )

        def indexes() -> set[str]:
            with engine.connect() as conn:
                return {i["name"] for i in sa.inspect(conn).get_indexes("events")}

        try:
            with engine.begin() as conn:
                command.upgrade(alembic_config(conn), "0006")
                conn.execute(
                    insert, [{"seq": n, "key": f"e{n}", "oid": f"i-{n % 2}"} for n in (1, 2, 3)]
                )
            assert "ix_events_account_object" not in indexes()
            store = SqlStore.open(url)
            assert "ix_events_account_object" in indexes()
            assert [e.key for e in store.events(account_id="acct-1", object_id="i-1")] == [
                "e1",
                "e3",
            ]
            store.close()
            with engine.begin() as conn:
                command.downgrade(alembic_config(conn), "0006")
            assert current_revision(engine) == "0006"
            assert "ix_events_account_object" not in indexes()
            assert {"ix_events_account_seq", "ix_events_at"} <= indexes()
            with engine.connect() as conn:
                assert conn.scalar(sa.text("SELECT count(*) FROM events")) == 3
        finally:
            engine.dispose()


def test_0006_refuses_a_ledger_amount_that_is_not_a_number(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    engine = sa.create_engine(parse_url(url).url)
    try:
        with engine.begin() as conn:
            command.upgrade(alembic_config(conn), "0005")
            conn.execute(
                sa.text(
                    "INSERT INTO ledger (key, account_id, at, kind, amount, memo)"
                    " VALUES ('k', 'acct-1', 1, 'topup', 'ten', '')"
                )
            )
        with pytest.raises(StoreDataError, match="ledger amount 'ten' of account acct-1"):
            SqlStore.open(url)
        assert current_revision(engine) == "0005"  # the upgrade rolled back whole
    finally:
        engine.dispose()


def test_opening_an_existing_database_again_keeps_its_data(sql_backend: Backend) -> None:
    first = sql_backend.open()
    first.commit(Commit(instances=[InstanceWrite(state("i-1"), None, launch("i-1"))]))
    first.close()
    for _ in range(2):
        again = sql_backend.open()
        assert [s.state for s in again.instances()] == [state("i-1")]
        again.close()
    assert sql_backend.url is not None
    _assert_schema_is_head(sql_backend.url)


def test_a_database_of_a_newer_version_is_refused(sql_backend: Backend) -> None:
    assert sql_backend.url is not None
    engine = sa.create_engine(parse_url(sql_backend.url).url)
    set_version = sa.text("UPDATE alembic_version SET version_num = :v")
    with engine.begin() as conn:
        conn.execute(set_version, {"v": "9999"})
    try:
        with pytest.raises(StoreUnavailable, match="newer lowcostgpu"):
            SqlStore.open(sql_backend.url)
    finally:
        with engine.begin() as conn:  # the PostgreSQL schema is shared by the session
            conn.execute(set_version, {"v": head_revision()})
        engine.dispose()


def test_a_stored_state_with_an_unknown_field_is_refused_clearly(sql_backend: Backend) -> None:
    store = sql_backend.open()
    store.commit(Commit(instances=[InstanceWrite(state("i-1"), None, launch("i-1"))]))
    assert sql_backend.url is not None
    engine = sa.create_engine(parse_url(sql_backend.url).url)
    with engine.begin() as conn:
        edit = sa.text("UPDATE instances SET state = replace(state, '{', :new)")
        conn.execute(edit, {"new": '{"colour":1,'})
    engine.dispose()
    with pytest.raises(StoreDataError, match=r"unknown field.*colour.*InstanceState"):
        store.instance("i-1")


@pytest.mark.parametrize(
    ("idle_s", "first_read"),
    [(0.0, "served"), (3600.0, "refused")],  # pinged after idle_s back in the pool, or not
)
def test_a_pooled_connection_is_pinged_only_after_sitting_idle(
    monkeypatch: pytest.MonkeyPatch, idle_s: float, first_read: str
) -> None:
    """The server drops a pooled connection. Pinged (it sat idle long enough), it is replaced
    before use; one used a moment ago is not pinged (a round trip a transaction saved), so the
    first read fails, as a `StoreUnavailable`, and the next gets a fresh connection."""
    monkeypatch.setattr(engine_module, "PING_AFTER_IDLE_S", idle_s)
    with pg_schema() as url:
        store = SqlStore.open(url)
        try:
            with store._engine.connect() as conn:  # the pool's one idle connection, after this
                pid = conn.execute(sa.text("SELECT pg_backend_pid()")).scalar()
            with psycopg.connect(PG_URL, autocommit=True) as killer:
                killer.execute("SELECT pg_terminate_backend(%s)", (pid,))
                alive = "SELECT count(*) FROM pg_stat_activity WHERE pid = %s"
                wait_until(lambda: killer.execute(alive, (pid,)).fetchone() == (0,), what="gone")
            if first_read == "served":
                assert store.instances() == []
            else:
                with pytest.raises(StoreUnavailable, match="cannot reach the database"):
                    store.instances()
            assert store.instances() == []
        finally:
            store.close()


def _event(key: str) -> EventRecord:
    return EventRecord(key, 1, "acct-1", "instance", "i-1", EventType.NORMAL, Reason.QUEUED, "m")


def test_concurrent_writers_get_distinct_increasing_event_seqs(sql_backend: Backend) -> None:
    stores = [sql_backend.open() for _ in range(4)]

    def write(n: int) -> None:
        for i in range(10):
            stores[n].commit(Commit(events=[_event(f"w{n}-{i}-a"), _event(f"w{n}-{i}-b")]))

    threads = [threading.Thread(target=write, args=(n,)) for n in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    got = stores[0].events()
    assert [e.seq for e in got] == list(range(1, 81))
    for n in range(4):  # each commit's pair is adjacent: seqs follow commit order
        mine = [e.seq for e in got if e.key.startswith(f"w{n}-")]
        assert all(b == a + 1 for a, b in zip(mine[::2], mine[1::2], strict=True))


# --- the lead lock across processes ---------------------------------------------------------

_OTHER_PROCESS = textwrap.dedent(
    """
    import sys
    from lowcostgpu.adapters.store import SqlStore
    store = SqlStore.open(sys.argv[1])
    for line in sys.stdin:  # one try_lead per line read
        print(store.try_lead("other-process"), flush=True)
    """
)


def test_the_lead_excludes_other_processes_and_a_killed_holder_frees_it(
    sql_backend: Backend,
) -> None:
    assert sql_backend.url is not None
    store = sql_backend.open()
    assert store.try_lead("me")
    other = subprocess.Popen(
        [sys.executable, "-c", _OTHER_PROCESS, sql_backend.url],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert other.stdin is not None and other.stdout is not None

    def other_tries() -> str:
        other.stdin.write("try\n")  # type: ignore[union-attr]
        other.stdin.flush()  # type: ignore[union-attr]
        return other.stdout.readline().strip()  # type: ignore[union-attr]

    try:
        assert other_tries() == "False"  # refused while this process leads
        store.release_lead("me")
        assert other_tries() == "True"
        assert other_tries() == "True"  # the holder keeps it
        assert not store.try_lead("me")
        other.send_signal(signal.SIGKILL)  # the holder dies without releasing anything
        other.wait(timeout=10)
        wait_until(lambda: store.try_lead("me"), what="the lead freed by the kernel")
    finally:
        other.kill()
        other.wait()


def test_a_lead_whose_session_died_is_taken_again_on_a_new_one() -> None:
    """PostgreSQL ends the lead's session (a restart, a dropped connection): the lock is gone."""
    with pg_schema() as url:
        store, other = SqlStore.open(url), SqlStore.open(url)
        try:
            assert store.try_lead("me")
            pid = store._lead._conn.execute(sa.text("SELECT pg_backend_pid()")).scalar()  # type: ignore[attr-defined]
            with psycopg.connect(PG_URL, autocommit=True) as admin:
                admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
            wait_until(lambda: other.try_lead("other"), what="the lead freed by the server")
            other.release_lead("other")
            assert store.try_lead("me")  # on a new session
            assert not other.try_lead("other")
        finally:
            store.close()
            other.close()
