"""`lowcostgpu sim`: load a trace and a fleet, run each policy on the real engine, write the report.

`--trace` is one of:
- `alibaba:DIR` (or a folder holding the openb_*.csv files): the Alibaba GPU trace, whose node
  list is the fleet (so `--fleet` is refused with it); its catalog ships with lowcostgpu;
- `synthetic` or `synthetic:hours=…,per_hour=…,on_demand=…,mean_work_h=…`: Poisson arrivals;
- `stress` or `stress:gpus=…,days=…,…`: a GPU cloud's fleet and daily load (`sim.stress`), which
  brings its fleet (so `--fleet` is refused with it too);
- a CSV file in our format (`sim.traces`).
The fleet of the last two is `--fleet FILE` (the local runtime's format), else the demo fleet.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from importlib.resources import files
from pathlib import Path
from typing import Any

from lowcostgpu.adapters.files import load_catalog, load_fleet
from lowcostgpu.core.policies import POLICY_NAMES, policy_by_name
from lowcostgpu.core.scheduler import SchedulerConfig
from lowcostgpu.core.victim_policy import VictimPolicy
from lowcostgpu.domain.catalog import Catalog, parse_catalog
from lowcostgpu.domain.errors import ConfigError, InvalidRequest
from lowcostgpu.domain.fleet import gpus_per_pool
from lowcostgpu.sim.alibaba import is_alibaba_dir, read_alibaba
from lowcostgpu.sim.clairvoyant import CLAIRVOYANT, REFERENCE_NAMES, Clairvoyant, reference_policy
from lowcostgpu.sim.fairness import frequent_checkpointers, group_rate
from lowcostgpu.sim.jobs import Trace
from lowcostgpu.sim.metrics import summarise
from lowcostgpu.sim.mix import draw
from lowcostgpu.sim.report import write_report
from lowcostgpu.sim.result import Sample, SimResult
from lowcostgpu.sim.runner import Simulation
from lowcostgpu.sim.stress import check_catalog, generate_stress, parse_stress
from lowcostgpu.sim.synthetic import generate, parse_mix
from lowcostgpu.sim.traces import read_csv_trace

ALIBABA_CATALOG = files("lowcostgpu.sim").joinpath("data", "alibaba-catalog.toml")

# The hiding experiment: this share of the frequent checkpointers hide their reports.
HIDING_SHARE = 0.25

Progress = Callable[[str, int, int], None]  # (policy, simulated seconds, seconds to simulate)


def load_trace(
    trace: str,
    fleet: Path | None,
    catalog_path: Path | None,
    *,
    seed: int = 0,
    fleet_scale: float = 1.0,
) -> tuple[Trace, Catalog]:
    if trace == "stress" or trace.startswith("stress:"):
        return _stress_trace(trace, fleet, catalog_path, seed=seed, fleet_scale=fleet_scale)
    directory = Path(trace.removeprefix("alibaba:"))
    if trace.startswith("alibaba:") or is_alibaba_dir(directory):
        if fleet is not None:
            raise ConfigError(
                "the Alibaba trace brings its own fleet (its node list): --fleet cannot be used",
                hint="leave out --fleet; use --fleet-scale to simulate a share of the nodes",
            )
        if not is_alibaba_dir(directory):
            raise ConfigError(
                f"{directory} does not hold the Alibaba trace (openb_node_list_gpu_node.csv)",
                hint="point alibaba: at the folder of cluster-trace-gpu-v2023's csv files",
                source=str(directory),
            )
        catalog = (
            load_catalog(catalog_path)
            if catalog_path
            else parse_catalog(ALIBABA_CATALOG.read_text(encoding="utf-8"), source="alibaba")
        )
        return read_alibaba(directory, seed=seed, fleet_scale=fleet_scale), catalog
    catalog = load_catalog(catalog_path)
    hosts = load_fleet(fleet, catalog)
    if trace == "synthetic" or trace.startswith("synthetic:"):
        return generate(parse_mix(trace), hosts, seed), catalog
    return read_csv_trace(Path(trace), hosts), catalog


def _stress_trace(
    trace: str, fleet: Path | None, catalog_path: Path | None, *, seed: int, fleet_scale: float
) -> tuple[Trace, Catalog]:
    if fleet is not None:
        raise ConfigError(
            "the stress trace brings its own fleet: --fleet cannot be used",
            hint="leave out --fleet; set its size with stress:gpus=N (or --fleet-scale)",
        )
    options = parse_stress(trace)
    catalog = load_catalog(catalog_path)
    loaded = generate_stress(options, seed, fleet_scale)
    check_catalog(loaded.hosts, catalog)
    return loaded, catalog


def policy_names(policy: str) -> list[str]:
    """`all`: every policy the server can run, then the clairvoyant yardstick."""
    if policy == "all":
        return [*POLICY_NAMES, CLAIRVOYANT]
    sim_policy(policy)  # refuses an unknown name, listing the known ones
    return [policy]


def sim_policy(name: str, seed: int = 0) -> VictimPolicy:
    """A policy the server can run (`core.policies`), or one of the simulator's yardsticks."""
    reference = reference_policy(name)
    if reference is not None:
        return reference
    try:
        return policy_by_name(name, seed)
    except InvalidRequest as exc:
        known = ", ".join((*POLICY_NAMES, *REFERENCE_NAMES))
        raise InvalidRequest(exc.message, hint=f"use one of: {known}, or all") from None


def simulate(
    trace: Trace,
    catalog: Catalog,
    policies: list[str],
    *,
    seed: int = 0,
    progress: Progress | None = None,
    config: SchedulerConfig | None = None,
    hiding_share: float = HIDING_SHARE,
) -> tuple[dict[str, Any], dict[str, list[Sample]]]:
    """Run every policy on the same trace; the report and the samples for the plots.

    With `hiding_share` > 0 each policy runs a second time, in which that share of the jobs that
    checkpoint every 10 minutes or more often (drawn by seed and job name) save their
    checkpoints but never report them (`hiding_experiment`, see `hiding_figures`).
    """
    hidden = hiding_jobs(trace, seed, hiding_share)
    base = config or SchedulerConfig()
    results: dict[str, dict[str, Any]] = {}
    samples: dict[str, list[Sample]] = {}
    for name in policies:
        policy = sim_policy(name, seed)
        config_for = replace(base, policy=policy)
        tick = (lambda now, n=name: progress(n, now, _span(trace))) if progress else None
        started = time.perf_counter()
        result = Simulation(trace, config_for, on_progress=tick).run()
        figures = summarise(result, catalog)
        figures["wall_s"] = round(time.perf_counter() - started, 3)
        figures.pop("on_demand_waits_s")
        if isinstance(policy, Clairvoyant):
            figures["reference"] = "knows each job's true loss: a yardstick, not a policy"
        elif hidden:  # (a yardstick's choice does not depend on reports: no hiding run)
            hiding = Simulation(trace, config_for, hidden=hidden).run()
            figures["hiding_experiment"] = hiding_figures(result, hiding, hidden, hiding_share)
            figures["hiding_gain"] = figures["hiding_experiment"]["gain"]
            figures["wall_s"] = round(time.perf_counter() - started, 3)
        if progress:
            progress(name, _span(trace), _span(trace))
        results[name] = figures
        samples[name] = result.samples
    report = {
        "trace": {"name": trace.name, **trace.notes, "jobs": len(trace.jobs)},
        "fleet": {
            "hosts": len(trace.hosts),
            "gpus": sum(h.gpu_count for h in trace.hosts),
            "pools": {str(p): g for p, g in gpus_per_pool(trace.hosts).items()},
        },
        "seed": seed,
        "end_s": trace.horizon_s,
        "policies": results,
        "events": sum(r["events"] for r in results.values()),
        "wall_s": round(sum(r["wall_s"] for r in results.values()), 3),
    }
    return report, samples


def hiding_jobs(trace: Trace, seed: int, share: float) -> frozenset[str]:
    """The frequent checkpointers that hide their reports in the hiding experiment."""
    if share <= 0:
        return frozenset()
    return frozenset(
        j.id
        for j in trace.jobs
        if j.capacity_class.preemptible
        and j.checkpoint_interval_s is not None
        and j.checkpoint_interval_s <= 600
        and draw(seed, j.id, "hide") < share
    )


def hiding_figures(
    honest: SimResult, hiding: SimResult, hidden: frozenset[str], share: float
) -> dict[str, Any]:
    """What the hiders gain: 1 − (their interruptions per running hour when hiding) / (the same
    jobs' rate when they report). Positive means hiding pays; ≤ 0 is the goal."""
    before = group_rate(w for j, w in honest.workloads.items() if j in hidden)
    after = group_rate(w for j, w in hiding.workloads.items() if j in hidden)
    others = [w for j, w in hiding.workloads.items() if j not in hidden]
    gain = None if not before or after is None else round(1 - after / before, 5)
    return {
        "share_of_frequent_checkpointers": share,
        "hiding_jobs": len(hidden),
        "rate_when_reporting": None if before is None else round(before, 5),
        "rate_when_hiding": None if after is None else round(after, 5),
        "rate_of_honest_frequent_checkpointers_meanwhile": _r(
            group_rate(frequent_checkpointers(others))
        ),
        "gain": gain,
    }


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 5)


def _span(trace: Trace) -> int:
    if trace.horizon_s is not None:
        return trace.horizon_s
    return max((j.submit_s + j.work_s for j in trace.jobs), default=1)


def run_sim(
    *,
    trace: str,
    fleet: Path | None,
    policy: str,
    report_dir: Path,
    days: float | None = None,
    seed: int = 0,
    catalog: Path | None = None,
    fleet_scale: float = 1.0,
    replicate: int = 1,
    progress: Progress | None = None,
    risk_warnings: bool = True,
) -> dict[str, Any]:
    """`risk_warnings=False` runs without preemption-risk warnings (no early saves either)."""
    names = policy_names(policy)
    loaded, prices = load_trace(trace, fleet, catalog, seed=seed, fleet_scale=fleet_scale)
    loaded = loaded.until(days).replicated(replicate)
    config = SchedulerConfig() if risk_warnings else SchedulerConfig(risk_window_s=0)
    report, samples = simulate(loaded, prices, names, seed=seed, progress=progress, config=config)
    write_report(report_dir, report, samples)
    return report
