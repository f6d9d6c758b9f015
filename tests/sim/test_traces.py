"""Trace readers: our CSV (bad rows name their line), the Alibaba trace, the synthetic mix."""

from __future__ import annotations

from pathlib import Path

import pytest

from lowcostgpu.adapters.files import load_catalog, load_fleet
from lowcostgpu.domain.capacity import CapacityClass, PoolKey
from lowcostgpu.domain.errors import ConfigError
from lowcostgpu.sim.alibaba import read_alibaba
from lowcostgpu.sim.synthetic import generate, parse_mix
from lowcostgpu.sim.traces import HEADER, parse_csv_rows

ALIBABA = Path(__file__).resolve().parents[3] / "shared" / "data" / "alibaba-gpu-v2023"
HOSTS = load_fleet(None, load_catalog())


def _rows(*lines: str) -> list[list[str]]:
    return [list(HEADER)] + [line.split(",") for line in lines]


def test_a_good_csv_gives_jobs_in_submit_order() -> None:
    trace = parse_csv_rows(
        _rows("60,3600,2,a100-sxm4,interruptible,600,30", "0,100,1,rtx-4090,on-demand,,"),
        HOSTS,
        source="t.csv",
    )
    first, second = trace.jobs
    assert (first.submit_s, first.capacity_class, first.checkpoint_interval_s) == (
        0,
        CapacityClass.ON_DEMAND,
        None,
    )
    assert second.pool == PoolKey("eu-west", "a100-sxm4")  # the region with most A100s
    assert (second.checkpoint_interval_s, second.checkpoint_cost_s) == (600, 30)


@pytest.mark.parametrize(
    ("bad_row", "says"),
    [
        ("0,100,1,h200,on-demand,,", "no pool of GPU type 'h200'"),
        ("0,100,16,a100-sxm4,on-demand,,", "16 GPUs do not fit one host"),
        ("0,-5,1,a100-sxm4,on-demand,,", "duration_s must be ≥ 1"),
        ("0,ten,1,a100-sxm4,on-demand,,", "duration_s must be a whole number"),
        ("0,100,1,a100-sxm4,spot-ish,,", "unknown capacity type"),
        ("0,100,1,a100-sxm4,on-demand,,30", "a save only at a notice) is for interruptible"),
        ("0,100,1,a100-sxm4", "expected 7 columns"),
    ],
)
def test_a_bad_row_is_refused_naming_its_line(bad_row: str, says: str) -> None:
    rows = _rows("0,100,1,a100-sxm4,on-demand,,", bad_row)
    with pytest.raises(ConfigError) as info:
        parse_csv_rows(rows, HOSTS, source="jobs.csv")
    assert info.value.message.startswith("jobs.csv, line 3: ")
    assert says in info.value.message
    assert info.value.details["line"] == 3


def test_a_wrong_header_is_refused_on_line_1() -> None:
    with pytest.raises(ConfigError, match="line 1: the header must be submit_s,"):
        parse_csv_rows([["submit", "duration"]], HOSTS, source="jobs.csv")


def test_the_synthetic_mix_is_seeded() -> None:
    mix = parse_mix("synthetic:hours=5,per_hour=12,on_demand=0.5")
    assert generate(mix, HOSTS, 1) == generate(mix, HOSTS, 1)
    assert generate(mix, HOSTS, 1).jobs != generate(mix, HOSTS, 2).jobs


def test_an_unknown_synthetic_option_is_refused() -> None:
    with pytest.raises(ConfigError.__mro__[1], match="not understood"):
        parse_mix("synthetic:rate=3")


@pytest.mark.skipif(not ALIBABA.is_dir(), reason="the Alibaba trace is not in shared/data")
def test_the_alibaba_trace_maps_pods_to_jobs_and_nodes_to_hosts() -> None:
    trace = read_alibaba(ALIBABA)
    assert len(trace.hosts) == 1213
    assert sum(h.gpu_count for h in trace.hosts) == 6212
    assert trace.notes["skipped"] == {"never_scheduled": 861, "no_gpu": 1088}
    assert len(trace.jobs) == 8152 - 861 - 1088
    kinds = {j.capacity_class for j in trace.jobs}
    assert kinds == {CapacityClass.ON_DEMAND, CapacityClass.INTERRUPTIBLE}
    small = read_alibaba(ALIBABA, fleet_scale=0.02)
    assert {h.pool.gpu_type for h in small.hosts} == {h.pool.gpu_type for h in trace.hosts}
    assert len(small.hosts) < 40


def test_a_cost_without_an_interval_is_a_job_that_saves_only_at_a_notice() -> None:
    rows = _rows("0,100,1,a100-sxm4,interruptible,,60")
    (job,) = parse_csv_rows(rows, HOSTS, source="jobs.csv").jobs
    assert (job.checkpoint_interval_s, job.checkpoint_cost_s) == (None, 60)
