"""Volumes through the control plane on fakes: attach, refuse another size, grow, delete, bill."""

from __future__ import annotations

from decimal import Decimal

import pytest
from plane_world import World

from lowcostgpu.app.launch import LaunchRequest
from lowcostgpu.app.volumes import SHOWN_USERS
from lowcostgpu.core.rating import build_invoice
from lowcostgpu.domain.errors import Conflict, InvalidRequest, NotFound
from lowcostgpu.domain.events import Reason

ACCOUNT, OTHER = "acme", "globex"


def launch(w: World, volume: str | None, account: str = ACCOUNT) -> str:
    request = LaunchRequest(account, "a100-sxm4", "interruptible", 1, command=("x",), volume=volume)
    return w.plane.launch(request).state.id


def end(w: World, instance_id: str) -> None:
    """Stop the instance, its workload exits, and delete it (no time passes)."""
    allocation = w.allocation(instance_id)
    w.plane.stop(instance_id)
    w.runtime.finish(allocation, 0)
    w.tick()
    w.plane.delete(instance_id)


def storage(w: World, account: str = ACCOUNT) -> tuple[int, Decimal]:
    """The account's metered storage: GB-seconds, and their exact amount."""
    records = [r for r in w.store.usage(account_id=account) if r.kind == "storage"]
    invoice = build_invoice(account, records, w.plane.catalog, 0, 2**40)
    return sum(r.quantity_s for r in records), invoice.total_exact.amount


def test_a_volume_is_attached_by_name_and_another_size_is_refused_with_what_to_write() -> None:
    w = World()
    first = launch(w, "ckpts:1GB")
    with pytest.raises(Conflict) as refused:
        launch(w, "ckpts:500GB")
    assert refused.value.message == "volume ckpts exists with 1 GB, not 500 GB"
    assert "--volume ckpts or ckpts:1GB" in str(refused.value.hint)
    assert "lowcostgpu volumes resize ckpts 500GB" in str(refused.value.hint)
    second = launch(w, "ckpts")  # no size: the existing one, at its size
    assert w.store.instance(second).launch.volume_size_gb == 1
    assert launch(w, "ckpts:1GB")  # the same size attaches it too
    views = w.plane.volume_service.list(ACCOUNT)
    assert [(v.name, v.size_gb) for v in views] == [("ckpts", 1)]  # one volume, not three
    assert first in views[0].in_use_by and second in views[0].in_use_by


@pytest.mark.parametrize(
    ("volume", "error", "words"),
    [
        ("ckpts", InvalidRequest, "there is no volume ckpts yet"),
        ("ckpts:50", InvalidRequest, "has no unit"),
        ("ckpts:50TB", InvalidRequest, "unit 'TB' is not known"),
    ],
)
def test_a_launch_naming_no_existing_volume_or_no_unit_is_refused_and_writes_nothing(
    volume: str, error: type[Exception], words: str
) -> None:
    w = World()
    with pytest.raises(error, match=words):
        launch(w, volume)
    assert w.store.instances() == [] and w.store.volumes() == []


def test_delete_is_refused_while_an_instance_names_it_then_removes_it_and_its_data() -> None:
    w = World()
    inst = launch(w, "ckpts:2GB")
    w.tick(1)
    assert w.volumes.names() == [(ACCOUNT, "ckpts")]
    with pytest.raises(Conflict) as refused:
        w.plane.volume_service.delete(ACCOUNT, "ckpts")
    assert refused.value.message == f"volume ckpts is in use by {inst}"
    assert f"lowcostgpu rm {inst}" in str(refused.value.hint)
    allocation = w.allocation(inst)
    w.plane.stop(inst)
    w.runtime.finish(allocation, 0)
    w.tick(1)
    with pytest.raises(Conflict):  # a stopped instance still names it: it may be resumed
        w.plane.volume_service.delete(ACCOUNT, "ckpts")
    w.plane.delete(inst)
    w.plane.volume_service.delete(ACCOUNT, "ckpts")
    assert w.volumes.names() == []  # the runtime's volume, deleted after the commit
    assert w.store.pending_outbox() == []
    assert w.plane.volume_service.list(ACCOUNT) == []
    with pytest.raises(NotFound, match="no volume ckpts"):
        w.plane.volume_service.delete(ACCOUNT, "ckpts")
    assert Reason.VOLUME_DELETED in [e.reason for e in w.store.events() if e.object_id == "ckpts"]


@pytest.mark.parametrize(
    ("users", "more"), [(1, False), (SHOWN_USERS, False), (6, True), (9, True)]
)
def test_a_refused_delete_names_the_first_users_by_id_and_says_whether_there_are_more(
    users: int, more: bool
) -> None:
    w = World()
    ids = sorted(launch(w, "ckpts:1GB" if i == 0 else "ckpts") for i in range(users))
    launch(w, "ckpts:1GB", account=OTHER)  # the other account's namesake is never named
    with pytest.raises(Conflict) as refused:
        w.plane.volume_service.delete(ACCOUNT, "ckpts")
    shown = ids[:SHOWN_USERS]
    tail = " and more" if more else ""
    assert refused.value.message == f"volume ckpts is in use by {', '.join(shown)}{tail}"
    assert refused.value.details == {"instances": shown, "more": more}
    assert ("`lowcostgpu volumes show ckpts` lists them all" in str(refused.value.hint)) == more
    assert w.plane.volume_service.get(ACCOUNT, "ckpts").in_use_by == tuple(ids)  # all of them


def test_a_volume_grows_on_the_runtime_never_shrinks_and_the_same_size_changes_nothing() -> None:
    w = World()
    launch(w, "ckpts:2GB")
    w.tick(1)
    grown = w.plane.volume_service.resize(ACCOUNT, "ckpts", 5)
    assert (grown.size_gb, grown.resized_at) == (5, w.clock.now())
    assert w.volumes.ensure(ACCOUNT, "ckpts", 1).size_gb == 5  # the runtime's limit grew
    with pytest.raises(InvalidRequest, match="it cannot shrink to 3 GB"):
        w.plane.volume_service.resize(ACCOUNT, "ckpts", 3)
    events = len(w.store.events())
    assert w.plane.volume_service.resize(ACCOUNT, "ckpts", 5).size_gb == 5
    assert len(w.store.events()) == events
    assert launch(w, "ckpts:5GB")  # a launch now names the new size


def test_another_accounts_volume_of_the_same_name_is_invisible() -> None:
    w = World()
    launch(w, "ckpts:2GB", account=OTHER)
    service = w.plane.volume_service
    assert service.list(ACCOUNT) == []
    for call in (
        lambda: service.get(ACCOUNT, "ckpts"),
        lambda: service.delete(ACCOUNT, "ckpts"),  # 404, not "in use by" the other's instance
        lambda: service.resize(ACCOUNT, "ckpts", 9),
    ):
        with pytest.raises(NotFound) as missing:
            call()
        assert str(missing.value) == "no volume ckpts (`lowcostgpu volumes ls` lists yours)"
    mine = launch(w, "ckpts:7GB")  # its own volume of that name, of another size
    assert [v.in_use_by for v in service.list(ACCOUNT)] == [(mine,)]
    assert [v.size_gb for v in service.list(OTHER)] == [2]


def test_the_volume_keeps_the_last_checkpoint_step_a_run_on_it_reported() -> None:
    w = World()
    first = launch(w, "ckpts:1GB")
    w.tick(1)
    w.plane.report_checkpoint(first, 300)
    assert w.plane.volume_service.get(ACCOUNT, "ckpts").checkpoint_step == 300
    assert w.plane.volume_service.held_step(ACCOUNT, "ckpts") == 300
    assert w.plane.volume_service.held_step(OTHER, "ckpts") is None
    assert w.plane.volume_service.held_step(ACCOUNT, None) is None


def test_storage_is_billed_at_each_size_until_the_deletion_exactly() -> None:
    w = World()
    t0 = w.clock.now()
    inst = launch(w, "ckpts:10GB")
    w.tick(657)
    w.plane.volume_service.resize(ACCOUNT, "ckpts", 20)  # 10 GB for 657 s
    w.tick(657)
    end(w, inst)
    w.plane.volume_service.delete(ACCOUNT, "ckpts")  # 20 GB for 657 s
    assert w.clock.now() == t0 + 1314
    w.tick(3600)
    w.tick(3600)  # two passes an hour after: nothing more is billed
    # 10 × 657 + 20 × 657 GB-s at $0.10 per GB-month (730 h): 19710 / 26,280,000 = $0.00075
    assert storage(w) == (19710, Decimal("0.00075"))


def test_a_volume_made_again_after_its_deletion_bills_both_lives_and_not_the_gap() -> None:
    w = World()
    inst = launch(w, "ckpts:10GB")
    w.tick(657)
    end(w, inst)
    w.plane.volume_service.delete(ACCOUNT, "ckpts")  # 10 GB for 657 s
    w.tick(1000)  # nothing is billed while it does not exist
    again = launch(w, "ckpts:10GB")
    assert w.plane.volume_service.get(ACCOUNT, "ckpts").checkpoint_step is None
    w.tick(657)
    end(w, again)
    w.plane.volume_service.delete(ACCOUNT, "ckpts")  # 10 GB for 657 s
    w.tick(3600)
    assert storage(w) == (13140, Decimal("0.0005"))


def _disk_away(account_id: str, name: str) -> None:
    raise OSError(5, "disk away")


def test_a_delete_carried_out_late_spares_a_volume_made_again_meanwhile() -> None:
    w = World()
    inst = launch(w, "ckpts:1GB")
    w.tick(1)
    end(w, inst)
    w.volumes.delete = _disk_away  # type: ignore[method-assign]
    w.plane.volume_service.delete(ACCOUNT, "ckpts")  # its effect fails, stays pending
    (pending,) = w.store.pending_outbox()
    del w.volumes.delete  # the disk is back
    again = launch(w, "ckpts:1GB")
    w.tick(1)
    assert w.store.instance(again).state.status.value == "running"
    w.tick(3600)  # the delete's retry is due: it no longer applies, and is done
    assert pending.key not in {e.key for e in w.store.pending_outbox()}
    assert w.volumes.names() == [(ACCOUNT, "ckpts")]


def test_the_volume_step_follows_reports_not_another_runs_stop() -> None:
    w = World()
    first, second = launch(w, "ckpts:1GB"), launch(w, "ckpts")
    w.tick(1)
    w.plane.report_checkpoint(first, 300)
    w.plane.report_checkpoint(second, 500)
    w.plane.stop(first)  # the first run's own step (300) is not what the volume holds now
    assert w.plane.volume_service.get(ACCOUNT, "ckpts").checkpoint_step == 500
