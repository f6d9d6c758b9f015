"""Migration 0008: instances get `created_at` (filled from their launch JSON) and two indexes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command
from store_support import launch, state, store_at_revision

from lowcostgpu.adapters.store import SqlStore, StoreDataError, codec
from lowcostgpu.adapters.store.migrate import alembic_config, current_revision
from lowcostgpu.domain.status import InstanceStatus

INSERT = sa.text(
    "INSERT INTO instances (id, account_id, status, version, state, launch)"
    " VALUES (:id, :account_id, :status, 1, :state, :launch)"
)
NEW = {"ix_instances_active", "ix_instances_account_created"}
MANY = 2100  # more than one batch of the backfill (1000)


def _row(i: int, status: InstanceStatus = InstanceStatus.STOPPED) -> dict[str, object]:
    iid = f"i-{i:05d}"
    return {
        "id": iid,
        "account_id": f"acct-{i % 2}",
        "status": status.value,
        "state": codec.dumps(state(iid, account_id=f"acct-{i % 2}", status=status)),
        "launch": codec.dumps(launch(iid, account_id=f"acct-{i % 2}", created_at=1000 + i // 3)),
    }


def _indexes(engine: sa.Engine) -> set[str]:
    with engine.connect() as conn:
        return {i["name"] for i in sa.inspect(conn).get_indexes("instances")}


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql"])
def test_0008_fills_created_at_from_the_launch_and_downgrades_cleanly(
    dialect: str, tmp_path: Path
) -> None:
    """Rows of a 0007 database (over several batches, one without the field: its default 0) get
    their launch's created_at; pages and the live read work on them; the downgrade drops the
    column and the two indexes and keeps the rows and `ix_instances_live`."""
    with store_at_revision("0007", dialect, tmp_path) as (url, engine):
        old = [_row(i) for i in range(MANY)]
        old[7]["status"] = InstanceStatus.RUNNING.value
        legacy = json.loads(str(old[0]["launch"]))
        del legacy["created_at"]  # written before LaunchRecord had it
        old[0]["launch"] = json.dumps(legacy)
        with engine.begin() as conn:
            conn.execute(INSERT, old)
        store = SqlStore.open(url)
        try:
            with engine.connect() as conn:
                at = dict(conn.execute(sa.text("SELECT id, created_at FROM instances")).all())
            assert at["i-00000"] == 0
            assert all(at[f"i-{i:05d}"] == 1000 + i // 3 for i in range(1, MANY))
            page = store.instances_page("acct-1", limit=3)
            assert [s.state.id for s in page] == ["i-02099", "i-02097", "i-02095"]
            cursor = (page[-1].launch.created_at, page[-1].state.id)
            assert [s.state.id for s in store.instances_page("acct-1", limit=2, before=cursor)] == [
                "i-02093",
                "i-02091",
            ]
            assert [s.state.id for s in store.live_instances()] == ["i-00007"]
        finally:
            store.close()
        assert _indexes(engine) >= NEW
        with engine.begin() as conn:
            command.downgrade(alembic_config(conn), "0007")
        assert current_revision(engine) == "0007"
        assert not NEW & _indexes(engine) and "ix_instances_live" in _indexes(engine)
        with engine.connect() as conn:
            columns = {c["name"] for c in sa.inspect(conn).get_columns("instances")}
            assert "created_at" not in columns
            assert conn.scalar(sa.text("SELECT count(*) FROM instances")) == MANY


def test_0008_refuses_a_launch_record_that_is_not_json(tmp_path: Path) -> None:
    with store_at_revision("0007", "sqlite", tmp_path) as (url, engine):
        with engine.begin() as conn:
            conn.execute(INSERT, [{**_row(1), "launch": "{not json"}])
        with pytest.raises(StoreDataError, match="launch record of instance i-00001"):
            SqlStore.open(url)
        assert current_revision(engine) == "0007"  # the upgrade rolled back whole
