"""Migration 0013: the fleet's usage by interval start (an index), and each account's usage
totals kept in `usage_totals`, filled from the records already there."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command
from store_support import store_at_revision

from lowcostgpu.adapters.store import SqlStore
from lowcostgpu.adapters.store.migrate import alembic_config, current_revision
from lowcostgpu.core.metering import UsageRecord, usage_totals
from lowcostgpu.domain.capacity import CapacityClass
from lowcostgpu.ports.store_records import Commit

INSERT = sa.text(
    "INSERT INTO usage (subject_id, kind, interval_start, account_id, resource, capacity_class,"
    " interval_end, seconds, quantity, quantity_s)"
    " VALUES (:s, :k, :at, :a, :r, :c, :at + 60, 60, :q, :q * 60)"
)


def _rows() -> list[dict[str, object]]:
    """Two accounts; GPU records of both classes and storage records (no class)."""
    out: list[dict[str, object]] = []
    for n in range(30):
        account = f"acct-{n % 2}"
        storage = n % 5 == 0
        klass = None if storage else ("interruptible" if n % 3 else "on-demand")
        out.append(
            {
                "s": f"vol-{n % 2}" if storage else f"i-{n % 4}",
                "k": "storage" if storage else "gpu",
                "at": 60 * n,
                "a": account,
                "r": "data" if storage else "H100",
                "c": klass,
                "q": n + 1,
            }
        )
    return out


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql"])
def test_0013_fills_the_totals_from_the_records_and_downgrades_cleanly(
    dialect: str, tmp_path: Path
) -> None:
    with store_at_revision("0012", dialect, tmp_path) as (url, engine):
        with engine.begin() as conn:
            conn.execute(INSERT, _rows())
        store = SqlStore.open(url)
        records = store.usage()
        assert len(records) == 30
        assert store.usage_totals() == usage_totals(records)  # the kept table, filled
        more = UsageRecord(
            "i-9", "acct-1", "gpu", "H100", CapacityClass.ON_DEMAND, 9000, 9060, 60, 2, 120
        )
        store.commit(Commit(usage=[more]))
        assert store.usage_totals() == usage_totals([*records, more])
        store.close()
        with engine.begin() as conn:
            command.downgrade(alembic_config(conn), "0012")
        assert current_revision(engine) == "0012"
        with engine.connect() as conn:
            inspector = sa.inspect(conn)
            assert "usage_totals" not in inspector.get_table_names()
            assert "ix_usage_interval" not in {i["name"] for i in inspector.get_indexes("usage")}
            assert conn.scalar(sa.text("SELECT count(*) FROM usage")) == 31
        store = SqlStore.open(url)  # up again: filled from the records as they are now
        assert store.usage_totals() == usage_totals(store.usage())
        store.close()
