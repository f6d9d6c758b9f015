"""`--credit-lost-work` on the served path: the real ControlPlane on SQLite credits a reclaim's
lost work once, when the drained run ends (the workload left, or was killed at the deadline), in
that end's own commit, from the checkpoints reported until then; off, nothing changes."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import replace
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from plane_world import World

from lowcostgpu.adapters.store.sql import SqlStore
from lowcostgpu.api.app import create_app
from lowcostgpu.app.accounts import Accounts
from lowcostgpu.app.launch import LaunchRequest
from lowcostgpu.app.loop import ReconcileLoop
from lowcostgpu.cli import billing
from lowcostgpu.domain.events import Reason
from lowcostgpu.domain.status import InstanceStatus
from lowcostgpu.ports.store import Store
from lowcostgpu.ports.store_records import Commit, LedgerEntry
from waiting import wait_until

NOTICE_AFTER_CHECKPOINT_S = 840  # 14 minutes of work since the last reported checkpoint
GRACE_S = 300


def _world(store: Store, *, credit: bool) -> World:
    w = World(store)
    w.plane.config = replace(w.plane.config, credit_lost_work=credit)
    return w


def _account(w: World, name: str) -> str:
    accounts = Accounts(w.store, w.clock, w.plane.ids)
    account, _ = accounts.create_account(name)
    accounts.topup(account.id, "100")
    return account.id


def _noticed(w: World, *, report: bool = True) -> tuple[str, str, str]:
    """An interruptible 8-GPU instance of one account runs, reports a checkpoint (or none),
    and is reclaimed 14 minutes later for another account's on-demand launch: it drains."""
    acct, other = _account(w, "acme"), _account(w, "globex")
    i = w.plane.launch(LaunchRequest(acct, "a100-sxm4", "interruptible", 8, command=("t",)))
    w.tick()
    w.tick(10)
    if report:
        w.plane.report_checkpoint(i.state.id, 100)
    w.clock.advance(NOTICE_AFTER_CHECKPOINT_S)
    w.plane.launch(LaunchRequest(other, "a100-sxm4", "on-demand", 8, command=("serve",)))
    assert w.store.instance(i.state.id).state.status is InstanceStatus.INTERRUPTING
    return acct, other, i.state.id


def _drain_ends(w: World, instance_id: str, how: str) -> None:
    """`exit`: the workload leaves 20 s into its grace; `saved`: it reports a save at 10 s and
    leaves at 20 s; `killed`: it is still running at the deadline."""
    if how == "killed":
        w.tick(GRACE_S)
        return
    alloc = w.allocation(instance_id)
    w.clock.advance(10)
    if how == "saved":
        w.plane.report_checkpoint(instance_id, 101)
    w.clock.advance(10)
    w.runtime.finish(alloc, 143)
    w.tick()


def _reclaimed(w: World, *, report: bool = True, how: str = "killed") -> tuple[str, str, str]:
    acct, other, instance_id = _noticed(w, report=report)
    _drain_ends(w, instance_id, how)
    assert w.store.instance(instance_id).state.status is InstanceStatus.QUEUED  # requeued
    return acct, other, instance_id


def _credits(store: Store, account_id: str) -> list[LedgerEntry]:
    return [e for e in store.ledger(account_id) if e.kind == "credit"]


def _expected_usd(w: World) -> Decimal:
    rate = Fraction(w.plane.catalog.gpu("a100-sxm4").interruptible_per_gpu_hour.amount)
    exact = rate * 8 * NOTICE_AFTER_CHECKPOINT_S / 3600
    return Decimal(exact.numerator) / Decimal(exact.denominator)


def _events(store: Store, account_id: str, reason: Reason) -> list[int]:
    return [e.at for e in store.events(account_id=account_id) if e.reason is reason]


@pytest.fixture
def db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'store.db'}"


def test_with_the_option_off_a_reclaim_writes_no_credit(db: str) -> None:
    w = _world(SqlStore.open(db), credit=False)
    acct, _, _ = _reclaimed(w)
    assert _credits(w.store, acct) == []


@pytest.mark.parametrize("how", ["killed", "exit"])
def test_the_credit_is_written_when_the_drained_run_ends_not_at_the_notice(
    db: str, how: str
) -> None:
    w = _world(SqlStore.open(db), credit=True)
    acct, other, instance_id = _noticed(w)
    assert _credits(w.store, acct) == []  # draining: not decided yet
    _drain_ends(w, instance_id, how)
    (credit,) = _credits(w.store, acct)
    assert credit.amount == _expected_usd(w) and credit.amount > 0
    assert credit.memo == (
        f"credit: work lost at reclaim of {instance_id} (8 GPU × 0:14:00 since last checkpoint)"
    )
    (ended_at,) = _events(w.store, acct, Reason.INTERRUPTED)
    (notice_at,) = _events(w.store, acct, Reason.PREEMPTED)
    assert credit.at == ended_at == notice_at + (GRACE_S if how == "killed" else 20)
    assert _credits(w.store, other) == []  # the on-demand customer is credited nothing
    others = sum(e.amount for e in w.store.ledger(acct) if e.kind != "credit")  # top-up, charges
    assert w.store.balance(acct) == others + credit.amount  # the balance includes the credit


@pytest.mark.parametrize(
    ("report", "how", "credited"),
    [
        (True, "killed", True),  # killed at the deadline without a save: its 14 minutes
        (True, "saved", False),  # saved in its grace: it lost nothing
        (True, "exit", True),  # left without saving: its 14 minutes
        (False, "killed", False),  # never reported a checkpoint: nothing
        (False, "saved", False),  # its first report came in the grace: nothing lost
    ],
)
def test_what_was_reported_by_the_runs_end_decides_the_credit(
    db: str, report: bool, how: str, credited: bool
) -> None:
    w = _world(SqlStore.open(db), credit=True)
    acct, _, _ = _reclaimed(w, report=report, how=how)
    assert len(_credits(w.store, acct)) == (1 if credited else 0)


def test_the_credit_is_taken_once_across_a_replay_and_a_restart(db: str) -> None:
    w = _world(SqlStore.open(db), credit=True)
    acct, _, _ = _reclaimed(w)
    (credit,) = _credits(w.store, acct)
    balance = w.store.balance(acct)
    w.store.commit(Commit(ledger=[credit]))  # the same entry again: inserted unless it exists
    assert w.store.balance(acct) == balance
    restarted = _world(SqlStore.open(db), credit=True)  # a new server on the same database
    restarted.clock.advance(w.clock.now() - restarted.clock.now())
    for _ in range(5):
        restarted.tick(30)
    assert _credits(restarted.store, acct) == [credit]


class _FailsOnce:
    """A store whose first commit carrying an `Interrupted` event fails: a crash at the drain's
    end."""

    def __init__(self, store: Store) -> None:
        self._store, self.failed = store, False

    def commit(self, commit: Commit) -> None:
        if not self.failed and any(e.reason is Reason.INTERRUPTED for e in commit.events):
            self.failed = True
            raise ConnectionError("the database went away")
        self._store.commit(commit)

    def __getattr__(self, name: str) -> object:
        return getattr(self._store, name)


@pytest.mark.parametrize("how", ["killed", "exit"])
def test_a_drain_end_whose_commit_fails_credits_nothing_until_it_is_decided_again(
    db: str, how: str
) -> None:
    store = _FailsOnce(SqlStore.open(db))
    w = _world(store, credit=True)  # type: ignore[arg-type]
    acct, _, instance_id = _noticed(w)
    with pytest.raises(ConnectionError):
        _drain_ends(w, instance_id, how)
    assert store.failed and _credits(store, acct) == []  # lost together with the run's end
    assert w.store.instance(instance_id).state.status is InstanceStatus.INTERRUPTING
    w.tick()  # decided again (the exit is reported again; the deadline is in the store)
    assert w.store.instance(instance_id).state.status is InstanceStatus.QUEUED
    assert len(_credits(store, acct)) == 1
    w.tick(30)
    assert len(_credits(store, acct)) == 1


@pytest.fixture
def looping(db: str) -> Iterator[World]:
    """A served plane whose reconcile loop runs in its own thread (a short poll: the clock is
    the test's, the loop's waits are real)."""
    w = _world(SqlStore.open(db), credit=True)
    w.plane.config = replace(w.plane.config, poll_interval_s=0.02)
    loop = ReconcileLoop(w.plane, "test")
    thread = threading.Thread(target=loop.run, daemon=True)
    thread.start()
    try:
        yield w
    finally:
        loop.stop()
        thread.join(timeout=30)


def test_with_the_loop_running_the_credit_appears_once_the_workload_has_left(
    looping: World,
) -> None:
    w = looping
    acct, other = _account(w, "acme"), _account(w, "globex")
    i = w.plane.launch(LaunchRequest(acct, "a100-sxm4", "interruptible", 8, command=("t",)))
    instance_id = i.state.id
    running = InstanceStatus.RUNNING
    wait_until(lambda: w.store.instance(instance_id).state.status is running, what="it runs")
    w.plane.report_checkpoint(instance_id, 100)
    w.clock.advance(NOTICE_AFTER_CHECKPOINT_S)
    w.plane.launch(LaunchRequest(other, "a100-sxm4", "on-demand", 8, command=("serve",)))
    draining = w.store.instance(instance_id).state
    assert draining.status is InstanceStatus.INTERRUPTING  # it stays so until its workload left
    assert _credits(w.store, acct) == []
    w.clock.advance(20)
    w.runtime.finish(w.allocation(instance_id), 143)
    (credit,) = wait_until(lambda: _credits(w.store, acct), what="the credit at the drain's end")
    assert draining.notice_at is not None
    assert credit.amount == _expected_usd(w) and credit.at == draining.notice_at + 20


def test_the_bill_shows_the_credit_as_its_own_line_over_the_api_and_in_the_cli(db: str) -> None:
    w = _world(SqlStore.open(db), credit=True)
    acct, other, instance_id = _reclaimed(w)
    w.tick(60)  # a metering pass: the run's usage is charged
    accounts = Accounts(w.store, w.clock, w.plane.ids)
    keys = {a: accounts.create_key(a) for a in (acct, other)}
    app = create_app(w.plane, w.runtime, w.wired.tokens, lambda: True, accounts=accounts)
    with TestClient(app) as http:
        mine = http.get("/v1/billing", headers=_bearer(keys[acct])).json()
        theirs = http.get("/v1/billing", headers=_bearer(keys[other])).json()
        ledger = http.get("/v1/billing/balance", headers=_bearer(keys[acct])).json()["ledger"]
    (line,) = mine["credits"]
    exact = _expected_usd(w)
    assert line["description"] == _credits(w.store, acct)[0].memo
    assert Decimal(line["amount_exact"]) == exact  # --json: the exact value
    assert line["amount"] == f"{exact.quantize(Decimal('0.01'))}"
    assert Decimal(mine["total_after_credits"]) == Decimal(mine["total"]) - Decimal(line["amount"])
    assert theirs["credits"] == []  # one account never sees another's credit
    assert [e["kind"] for e in ledger].count("credit") == 1
    _, total = billing.bill_lines(mine, show_exact=False)
    (shown,) = billing.credit_lines(mine, show_exact=True)
    assert f"-${line['amount']}" in shown and f"reclaim of {instance_id}" in shown
    assert "0:14:00 since last checkpoint" in shown and f"(exact -${exact})" in shown
    assert f"credits -${line['amount']}" in total and "after credits" in total
    assert billing.credit_lines(theirs, show_exact=False) == []
    assert "credits" not in billing.bill_lines(theirs, show_exact=False)[1]


def _bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}
