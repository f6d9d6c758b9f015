"""Whole runs: determinism, the report files, the command line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from lowcostgpu.adapters.files import load_catalog, load_fleet
from lowcostgpu.cli.main import app
from lowcostgpu.core.policies import POLICY_NAMES
from lowcostgpu.sim.command import simulate
from lowcostgpu.sim.synthetic import generate, parse_mix

ALIBABA = Path(__file__).resolve().parents[3] / "shared" / "data" / "alibaba-gpu-v2023"


def _without_wall(report: dict[str, Any]) -> dict[str, Any]:
    report = json.loads(json.dumps(report))
    report.pop("wall_s")
    for figures in report["policies"].values():
        figures.pop("wall_s")
    return report


def _synthetic_report(seed: int) -> dict[str, Any]:
    catalog = load_catalog()
    trace = generate(parse_mix("synthetic:hours=12,per_hour=10"), load_fleet(None, catalog), seed)
    report, _ = simulate(trace, catalog, list(POLICY_NAMES), seed=seed)
    return report


def test_the_same_seed_gives_the_same_report() -> None:
    first = _synthetic_report(4)
    assert _without_wall(first) == _without_wall(_synthetic_report(4))
    assert _without_wall(first) != _without_wall(_synthetic_report(5))
    assert sum(p["interruptions"] for p in first["policies"].values()) > 0  # not a trivial run


def test_the_sim_command_writes_json_and_an_offline_html(tmp_path: Path) -> None:
    trace = tmp_path / "jobs.csv"
    trace.write_text(
        "submit_s,duration_s,gpus,gpu_type,class,checkpoint_interval_s,checkpoint_cost_s\n"
        "0,3600,8,a100-sxm4,interruptible,600,30\n"
        "600,600,8,a100-sxm4,on-demand,,\n"
        "600,600,8,a100-sxm4,on-demand,,\n",
        encoding="utf-8",
    )
    out = tmp_path / "report"
    result = CliRunner().invoke(
        app, ["sim", "--trace", str(trace), "--policy", "all", "--report", str(out)]
    )
    assert result.exit_code == 0, result.output
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert sorted(report["policies"]) == sorted([*POLICY_NAMES, "clairvoyant"])
    assert "reference" in report["policies"]["clairvoyant"]  # the yardstick is marked as one
    for figures in report["policies"].values():
        for key in (
            "lost_gpu_hours",
            "preemptible_goodput",
            "interruptions",
            "median_time_between_interruptions_s",
            "on_demand_p99_wait_s",
            "revenue_usd",
            "events",
            "wall_s",
        ):
            assert key in figures
        assert isinstance(figures["revenue_usd"], str)  # Decimal, exact
        assert figures["interruptions"] >= 1
    html = (out / "report.html").read_text(encoding="utf-8")
    assert html.count("<svg") >= 7
    assert "<script" not in html and "http://" not in html.replace('"http://www.w3.org', "")
    # Every figure explained, with its unit, and never Python's None.
    assert "None" not in html and "None" not in result.output
    assert set(report["figures_explained"]) >= {"lost_gpu_hours", "on_demand_p99_wait_s"}
    assert "What the figures mean" in html and "GPU-h" in html
    assert "GPU-h to redo" in result.output and "refused at first" in result.output


def test_a_bad_trace_row_is_a_clear_error_not_a_traceback(tmp_path: Path) -> None:
    trace = tmp_path / "jobs.csv"
    trace.write_text(
        "submit_s,duration_s,gpus,gpu_type,class,checkpoint_interval_s,checkpoint_cost_s\n"
        "0,x,1,a100-sxm4,on-demand,,\n",
        encoding="utf-8",
    )
    result = CliRunner().invoke(app, ["sim", "--trace", str(trace), "--report", str(tmp_path)])
    assert result.exit_code == 2
    assert "line 2: duration_s must be a whole number" in result.output
    assert "Traceback" not in result.output


def test_an_unknown_policy_is_refused(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["sim", "--trace", "synthetic", "--policy", "fifo", "--report", str(tmp_path)]
    )
    assert result.exit_code == 2
    assert "unknown victim policy 'fifo'" in result.output
    assert "clairvoyant" in result.output  # the hint names the yardsticks too


def test_a_slice_of_the_alibaba_trace_runs(tmp_path: Path) -> None:
    if not ALIBABA.is_dir():
        return
    result = CliRunner().invoke(
        app,
        [
            "sim",
            "--trace",
            f"alibaba:{ALIBABA}",
            "--fleet-scale",
            "0.02",
            "--days",
            "120",
            "--policy",
            "least-work-lost",
            "--report",
            str(tmp_path),
        ],
    )
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "report.json").read_text(encoding="utf-8"))
    assert report["trace"]["jobs"] > 100
    assert report["end_s"] == 120 * 86400


@pytest.mark.parametrize(
    ("flag", "warned"), [("--risk-warnings", True), ("--no-risk-warnings", False)]
)
def test_sim_warns_the_next_victims_unless_told_not_to(
    tmp_path: Path, flag: str, warned: bool
) -> None:
    out = tmp_path / "report"
    mix = "synthetic:hours=24,per_hour=8,on_demand=0.35,mean_work_h=2"
    args = ["sim", "--trace", mix, "--policy", "least-work-lost", "--seed", "3", flag]
    result = CliRunner().invoke(app, [*args, "--report", str(out)])
    assert result.exit_code == 0, result.output
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    warnings = report["policies"]["least-work-lost"]["risk_warnings"]["warnings"]
    assert (warnings > 0) is warned
