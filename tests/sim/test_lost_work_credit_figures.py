"""What `--credit-lost-work` would cost the operator, in the simulator: the server's rule
(`core.credits`) at each reclaim, the reported checkpoints being the ones the engine saw."""

from __future__ import annotations

from fractions import Fraction

from sim_builders import OD, job, run
from test_sim_matches_app import _play_in_the_app

from lowcostgpu.adapters.files import load_catalog
from lowcostgpu.adapters.store.memory import MemoryStore
from lowcostgpu.app.billing import credit_amount
from lowcostgpu.app.plane import PlaneConfig
from lowcostgpu.core.rating import to_money
from lowcostgpu.sim.metrics import summarise
from lowcostgpu.sim.report import FIGURES, TABLE_KEYS, credit_lines


def test_a_reporting_job_is_credited_the_work_since_its_last_reported_checkpoint() -> None:
    # 2 GPUs, saves every 100 s of work in 10 s: reported at 110, 220, 330, 440. The notice at
    # 500 credits 2 × 60 GPU-s (decided at T+0: the save it then makes in its grace is not seen).
    result = run([job("ir", 0, 1000, 2, interval=100, cost=10), job("od", 500, 100, 2, OD)])
    (credit,) = result.lost_work_credits
    assert (credit.instance_id, credit.notice_at, credit.gpu_s) == ("ir", 500, 120)
    catalog = load_catalog()
    figures = summarise(result, catalog)
    rate = Fraction(catalog.gpu("a100-sxm4").interruptible_per_gpu_hour.amount)
    assert figures["lost_work_credits"] == 1
    assert figures["lost_work_credit_true_loss_gpu_hours"] == 0  # it saved in its grace
    assert figures["lost_work_credit_gpu_hours"] == round(120 / 3600, 3)
    assert figures["lost_work_credit_usd"] == str(to_money(rate * 120 / 3600).amount)
    share = rate * 120 / 3600 / Fraction(figures["revenue_interruptible_usd"])
    assert figures["lost_work_credit_share_of_interruptible_revenue"] == round(float(share), 4)
    (line,) = credit_lines(figures)
    assert line.startswith("  lost-work credit $0.01 (0.033 GPU-h at 1 reclaims;")


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


def test_a_job_that_cannot_save_in_its_grace_is_credited_its_gpu_time_since_the_report() -> None:
    # Saves every 100 s of work in 400 s (longer than the grace): reported at 500 and 1000; at
    # the notice (1200) it has worked 100 s since and is 100 s into a save it cannot finish.
    result = run([job("ir", 0, 2000, 1, interval=100, cost=400), job("od", 1200, 10, 2, OD)])
    figures = summarise(result, load_catalog())
    (credit,) = result.lost_work_credits
    assert credit.gpu_s == 200  # the GPU-time since the report: the work and the lost save
    assert figures["lost_work_credit_true_loss_gpu_hours"] == round(100 / 3600, 3)  # the work


def test_the_figures_are_in_the_table_and_explained() -> None:
    for key in ("lost_work_credit_usd", "lost_work_credit_share_of_interruptible_revenue"):
        assert key in TABLE_KEYS and key in FIGURES


def test_the_simulator_credits_what_the_served_plane_credits_in_the_same_scenario() -> None:
    sim = run([job("ir", 0, 1000, 2, interval=100, cost=10), job("od", 500, 100, 2, OD)])
    store = MemoryStore()
    _play_in_the_app(PlaneConfig(credit_lost_work=True), store)
    (served,) = [e for e in store.ledger("sim") if e.kind == "credit"]
    (simulated,) = sim.lost_work_credits
    assert (served.key, served.at, served.memo) == (simulated.key, 500, simulated.memo)
    assert served.amount == credit_amount(simulated, load_catalog())
