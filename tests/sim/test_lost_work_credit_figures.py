"""What `--credit-lost-work` would cost the operator, in the simulator: the server's rule
(`core.credits`) when each reclaimed run ends, the reported checkpoints being the ones the engine
saw; and the served plane credits the same in the same scenario."""

from __future__ import annotations

from fractions import Fraction

from sim_builders import OD, POOL, job, run
from test_sim_matches_app import Ids, _play_in_the_app

from lowcostgpu.adapters.clock import FixedClock
from lowcostgpu.adapters.fakes import FakeRuntime, FakeVolumes
from lowcostgpu.adapters.files import load_catalog
from lowcostgpu.adapters.store.memory import MemoryStore
from lowcostgpu.app.billing import credit_amount
from lowcostgpu.app.launch import LaunchRequest
from lowcostgpu.app.plane import PlaneConfig
from lowcostgpu.bootstrap.wiring import wire
from lowcostgpu.core.rating import to_money
from lowcostgpu.domain.capacity import Host
from lowcostgpu.ports.store_records import LedgerEntry
from lowcostgpu.sim.figure_words import FIGURES, credit_lines
from lowcostgpu.sim.metrics import summarise
from lowcostgpu.sim.report import TABLE_KEYS

# 1 GPU, saves every 100 s of work in 400 s (longer than the 300 s grace): reported at 500 and
# 1000. The notice at 1200 finds it 100 s into its work and 100 s into a save it cannot finish;
# it is killed at the deadline, 1500.
CANNOT_SAVE_IN_GRACE = [job("ir", 0, 2000, 1, interval=100, cost=400), job("od", 1200, 10, 2, OD)]
# 2 GPUs, saves every 100 s of work in 10 s: reported at 110, 220, 330, 440; the notice at 500
# makes it save (reported at 510) and leave.
SAVES_IN_GRACE = [job("ir", 0, 1000, 2, interval=100, cost=10), job("od", 500, 100, 2, OD)]


def test_a_job_killed_at_the_deadline_is_credited_its_gpu_time_since_the_report() -> None:
    result = run(CANNOT_SAVE_IN_GRACE)
    (credit,) = result.lost_work_credits
    assert (credit.instance_id, credit.notice_at, credit.decided_at) == ("ir", 1200, 1500)
    assert credit.gpu_s == 200  # the GPU-time since the report: the work and the save cut short
    catalog = load_catalog()
    figures = summarise(result, catalog)
    assert figures["lost_work_credit_true_loss_gpu_hours"] == round(100 / 3600, 3)  # the work
    rate = Fraction(catalog.gpu("a100-sxm4").interruptible_per_gpu_hour.amount)
    assert figures["lost_work_credits"] == 1
    assert figures["lost_work_credit_gpu_hours"] == round(200 / 3600, 3)
    assert figures["lost_work_credit_usd"] == str(to_money(rate * 200 / 3600).amount)
    share = rate * 200 / 3600 / Fraction(figures["revenue_interruptible_usd"])
    assert figures["lost_work_credit_share_of_interruptible_revenue"] == round(float(share), 4)
    (line,) = credit_lines(figures)
    assert line.startswith("  lost-work credit $0.01 (0.056 GPU-h at 1 reclaims;")


def test_a_job_that_saves_in_its_grace_is_credited_nothing() -> None:
    result = run(SAVES_IN_GRACE)
    figures = summarise(result, load_catalog())
    assert len(result.instances["ir"].runs) == 2  # it was reclaimed, saved, and ran again
    assert result.lost_work_credits == []  # its save at 510 came after the notice at 500
    assert (figures["lost_work_credit_usd"], figures["lost_work_credits"]) == ("0", 0)
    assert figures["lost_work_credit_true_loss_gpu_hours"] == 0


def test_a_job_that_never_reports_is_credited_nothing() -> None:
    result = run([job("ir", 0, 1000, 2), job("od", 500, 100, 2, OD)])
    figures = summarise(result, load_catalog())
    assert result.lost_work_credits == []
    assert figures["lost_gpu_hours"] > 0  # it lost its run, but reported no checkpoint
    assert (figures["lost_work_credit_usd"], figures["lost_work_credits"]) == ("0", 0)
    assert figures["lost_work_credit_share_of_interruptible_revenue"] == 0


def test_no_interruptible_revenue_gives_no_share() -> None:
    figures = summarise(run([job("od", 0, 100, 2, OD)]), load_catalog())
    assert figures["lost_work_credit_share_of_interruptible_revenue"] is None


def test_the_figures_are_in_the_table_and_explained() -> None:
    for key in ("lost_work_credit_usd", "lost_work_credit_share_of_interruptible_revenue"):
        assert key in TABLE_KEYS and key in FIGURES
    assert "lost_work_credit_true_loss_gpu_hours" in FIGURES


def _credits_served_when_it_cannot_save_in_its_grace() -> list[LedgerEntry]:
    """CANNOT_SAVE_IN_GRACE through the real plane (store, outbox, runtime reports, ticks)."""
    clock = FixedClock(0)
    store = MemoryStore()
    plane = wire(
        store=store,
        runtime=FakeRuntime(now=clock.now),
        volumes=FakeVolumes(),
        clock=clock,
        ids=Ids(),
        hosts=[Host("h0", POOL, 2)],
        catalog=load_catalog(),
        secret=b"s" * 32,
        metadata_url="http://127.0.0.1:9/v1/metadata",
        config=PlaneConfig(credit_lost_work=True),
    ).plane

    def at(t: int) -> None:
        clock.at = t
        plane.tick()  # take in reports, decide, carry out effects
        plane.tick()  # observe what was just started

    plane.launch(LaunchRequest("sim", "a100-sxm4", "interruptible", 1, command=("ir",)))
    at(0)
    for t, step in ((500, 100), (1000, 200)):
        clock.at = t
        plane.report_checkpoint("ir", step)
    clock.at = 1200
    plane.launch(LaunchRequest("sim", "a100-sxm4", "on-demand", 2, command=("od",)))
    at(1200)  # SIGTERM: it cannot finish its save in the grace
    assert [e for e in store.ledger("sim") if e.kind == "credit"] == []  # still draining
    at(1500)  # killed at the deadline
    return [e for e in store.ledger("sim") if e.kind == "credit"]


def test_the_simulator_credits_what_the_served_plane_credits_in_the_same_scenario() -> None:
    (served,) = _credits_served_when_it_cannot_save_in_its_grace()
    (simulated,) = run(CANNOT_SAVE_IN_GRACE).lost_work_credits
    assert (served.key, served.at, served.memo) == (simulated.key, 1500, simulated.memo)
    assert served.amount == credit_amount(simulated, load_catalog())


def test_neither_the_simulator_nor_the_served_plane_credits_a_save_in_the_grace() -> None:
    store = MemoryStore()
    _play_in_the_app(PlaneConfig(credit_lost_work=True), store)  # it saves at 510, leaves
    assert [e for e in store.ledger("sim") if e.kind == "credit"] == []
    assert run(SAVES_IN_GRACE).lost_work_credits == []
