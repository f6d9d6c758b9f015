"""The token keyring (bootstrap/token_keys.py): a key per start, old keys only while needed."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from lowcostgpu.bootstrap import token_keys
from lowcostgpu.core.instance_state import InstanceState
from lowcostgpu.domain.capacity import CapacityClass, PoolKey
from lowcostgpu.domain.errors import Unauthenticated


def _live(enqueued_at: int | None, allocated: bool = True) -> InstanceState:
    return InstanceState(
        id=f"i-{enqueued_at}",
        account_id="a",
        pool=PoolKey("r", "a100"),
        gpus=1,
        capacity_class=CapacityClass.parse("interruptible"),
        enqueued_at=enqueued_at,
        allocation_id="i@1" if allocated else None,
    )


def _kids(data_dir: Path) -> list[str]:
    keys = json.loads((data_dir / token_keys.KEYRING_FILE).read_text())["keys"]
    return [k["kid"] for k in keys]


def test_each_start_mints_with_a_new_key_and_the_file_is_private(tmp_path: Path) -> None:
    (tmp_path / token_keys.LEGACY_SECRET_FILE).write_bytes(b"s" * 32)
    first = token_keys.rotate(tmp_path, [], 1000)
    second = token_keys.rotate(tmp_path, [], 2000)
    assert first.key_ids == ("k1",) and second.key_ids == ("k2",)
    mode = stat.S_IMODE((tmp_path / token_keys.KEYRING_FILE).stat().st_mode)
    assert mode == 0o600
    assert not (tmp_path / token_keys.LEGACY_SECRET_FILE).exists()  # bound to no run: gone


def test_an_old_key_stays_while_a_run_it_may_have_minted_is_live(tmp_path: Path) -> None:
    token_keys.rotate(tmp_path, [], 1000)  # k1, current from 1000
    token_keys.rotate(tmp_path, [_live(999)], 2000)  # k2 from 2000; k1 minted runs enqueued before
    cases = [  # (live instances, keys kept at the start at 3000)
        ([_live(1998)], ["k1", "k2", "k3"]),  # enqueued under k1: kept
        ([_live(2001)], ["k2", "k3"]),  # enqueued a second after k2 was made: k1 is dropped
        ([_live(None)], ["k1", "k2", "k3"]),  # unknown: kept
        ([_live(1500, allocated=False)], ["k3"]),  # queued, no run, no token to honour
        ([], ["k3"]),
    ]
    saved = (tmp_path / token_keys.KEYRING_FILE).read_text()
    for live, kept in cases:
        (tmp_path / token_keys.KEYRING_FILE).write_text(saved)
        tokens = token_keys.rotate(tmp_path, live, 3000)
        assert list(tokens.key_ids) == kept, live
        assert _kids(tmp_path) == kept


def test_a_token_of_a_dropped_key_is_refused(tmp_path: Path) -> None:
    old = token_keys.rotate(tmp_path, [], 1000)
    token = old.mint("i-a", "i-a@1")
    kept = token_keys.rotate(tmp_path, [_live(999)], 2000)
    assert kept.verify(token).instance_id == "i-a"
    dropped = token_keys.rotate(tmp_path, [], 3000)
    with pytest.raises(Unauthenticated):
        dropped.verify(token)
