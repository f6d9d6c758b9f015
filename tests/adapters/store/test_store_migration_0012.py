"""Migration 0012: instances get `volume_name` (filled from their launch JSON) and two indexes."""

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
    "INSERT INTO instances (id, account_id, status, version, state, launch, created_at)"
    " VALUES (:id, :account_id, :status, 1, :state, :launch, 0)"
)
NEW = {"ix_instances_account_id", "ix_instances_account_volume"}
MANY = 2100  # more than one batch of the backfill (1000)


def _volume(i: int) -> str | None:
    """Every third row names no volume; the others one of two names."""
    return None if i % 3 == 0 else f"vol-{i % 2}"


def _row(i: int, status: InstanceStatus = InstanceStatus.STOPPED) -> dict[str, object]:
    iid, account = f"i-{i:05d}", f"acct-{i % 4 // 2}"
    return {
        "id": iid,
        "account_id": account,
        "status": status.value,
        "state": codec.dumps(state(iid, account_id=account, status=status)),
        "launch": codec.dumps(launch(iid, account_id=account, volume_name=_volume(i))),
    }


def _indexes(engine: sa.Engine) -> set[str]:
    with engine.connect() as conn:
        return {i["name"] for i in sa.inspect(conn).get_indexes("instances")}


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql"])
def test_0012_fills_volume_name_from_the_launch_and_downgrades_cleanly(
    dialect: str, tmp_path: Path
) -> None:
    """Rows of a 0011 database (over several batches; one written before LaunchRecord had the
    field, one naming ""): each gets its launch's volume name (NULL for none), a volume's users
    are found through the new index, and the downgrade drops the column and both indexes and
    keeps the rows."""
    with store_at_revision("0011", dialect, tmp_path) as (url, engine):
        old = [_row(i) for i in range(MANY)]
        old[7]["status"] = InstanceStatus.DELETED.value
        legacy = json.loads(str(old[1]["launch"]))
        del legacy["volume_name"]
        old[1]["launch"] = json.dumps(legacy)
        old[2]["launch"] = codec.dumps(launch("i-00002", account_id="acct-1", volume_name=""))
        with engine.begin() as conn:
            conn.execute(INSERT, old)
        store = SqlStore.open(url)
        try:
            with engine.connect() as conn:
                named = dict(conn.execute(sa.text("SELECT id, volume_name FROM instances")).all())
            assert named["i-00001"] is None and named["i-00002"] is None
            assert all(named[f"i-{i:05d}"] == _volume(i) for i in range(3, MANY))
            users = store.instances_naming_volume("acct-1", "vol-1", limit=3)
            assert users == ["i-00011", "i-00019", "i-00023"]  # 7 is deleted, 15 names none
            expected = [f"i-{i:05d}" for i in range(3, MANY) if i % 4 == 0 and i % 3]
            assert store.instances_naming_volume("acct-0", "vol-0") == expected
        finally:
            store.close()
        assert _indexes(engine) >= NEW
        with engine.begin() as conn:
            command.downgrade(alembic_config(conn), "0011")
        assert current_revision(engine) == "0011"
        assert not NEW & _indexes(engine) and "ix_instances_account_created" in _indexes(engine)
        with engine.connect() as conn:
            columns = {c["name"] for c in sa.inspect(conn).get_columns("instances")}
            assert "volume_name" not in columns
            assert conn.scalar(sa.text("SELECT count(*) FROM instances")) == MANY


@pytest.mark.parametrize(
    ("launch_text", "words"),
    [
        ("{not json", "launch record of instance i-00001 is not valid JSON"),
        ('{"volume_name": 7}', "i-00001.launch.volume_name"),
    ],
)
def test_0012_refuses_a_launch_record_it_cannot_read(
    tmp_path: Path, launch_text: str, words: str
) -> None:
    with store_at_revision("0011", "sqlite", tmp_path) as (url, engine):
        with engine.begin() as conn:
            conn.execute(INSERT, [{**_row(1), "launch": launch_text}])
        with pytest.raises(StoreDataError, match=words):
            SqlStore.open(url)
        assert current_revision(engine) == "0011"  # the upgrade rolled back whole
