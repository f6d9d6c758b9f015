"""Victim policies over several seeds: lost work, checkpointer penalty, hiding gain.

    .venv/bin/python bench/fairness.py [--trace alibaba:DIR --fleet-scale 0.005 --seeds 0,1,2]
        [--policy least-work-lost --policy '{"older_non_reporter_per_s": 120}' ...]
        [--on-demand-hold-s 0] [--risk-warnings on|off]

One seed's figures swing by a factor of several (which jobs collide is luck), so the figures that
tune `fair-least-work-lost` are pooled over seeds: lost GPU-hours and interruptions summed, the
checkpointer penalty averaged, the hiding gain pooled (1 − Σ hiders' rate when hiding ÷ Σ their
rate when reporting), and the share of the loss at its reclaims that the clairvoyant choice at each
of them would have saved (`sim.reclaims`), and the preemption-risk warnings' precision within
15 min and recall pooled the same way (weighted by warnings and by interruptions;
`--risk-warnings off` runs without them: `risk_window_s` 0). A `--policy` is a policy name, a
JSON object of
`FairLeastWorkLost` parameters, or one of the simulator's yardsticks (`clairvoyant`,
`clairvoyant-fair`: they know each job's true loss, `sim.clairvoyant`). It prints a Markdown table;
the figures are in docs/simulation.md. It runs each policy twice per seed (the hiding experiment;
once for a yardstick): about 25 s per seed on the Alibaba trace at scale 0.005, 3 s on the
synthetic mix.
"""

from __future__ import annotations

import argparse
import json
import statistics
from decimal import Decimal
from pathlib import Path
from typing import Any

from lowcostgpu.core.fairness import FairLeastWorkLost
from lowcostgpu.core.policies import DEFAULT_POLICY_NAME
from lowcostgpu.core.scheduler import SchedulerConfig
from lowcostgpu.core.victim_policy import VictimPolicy
from lowcostgpu.sim.clairvoyant import CLAIRVOYANT, CLAIRVOYANT_FAIR, Clairvoyant
from lowcostgpu.sim.command import (
    HIDING_SHARE,
    hiding_figures,
    hiding_jobs,
    load_trace,
    sim_policy,
)
from lowcostgpu.sim.metrics import summarise
from lowcostgpu.sim.runner import Simulation

ALIBABA = Path(__file__).resolve().parents[2] / "shared" / "data" / "alibaba-gpu-v2023"
DEFAULT_POLICIES = (
    DEFAULT_POLICY_NAME,
    "least-work-lost",
    "youngest-first",
    CLAIRVOYANT,
    CLAIRVOYANT_FAIR,
)


def policy_of(spec: str, seed: int) -> VictimPolicy:
    if spec.startswith("{"):
        return FairLeastWorkLost(**json.loads(spec))
    return sim_policy(spec, seed)


def one_seed(
    trace_spec: str,
    scale: float,
    seed: int,
    policy: VictimPolicy,
    hold_s: int,
    risk_window_s: int = SchedulerConfig().risk_window_s,
) -> dict[str, Any]:
    trace, catalog = load_trace(trace_spec, None, None, seed=seed, fleet_scale=scale)
    config = SchedulerConfig(policy=policy, on_demand_hold_s=hold_s, risk_window_s=risk_window_s)
    honest = Simulation(trace, config).run()
    figures = summarise(honest, catalog)
    if isinstance(policy, Clairvoyant):  # reports do not change its choices: no hiding run
        return {**figures, "hiding": None}
    hidden = hiding_jobs(trace, seed, HIDING_SHARE)
    hiding_run = Simulation(trace, config, hidden=hidden).run()
    hiding = hiding_figures(honest, hiding_run, hidden, HIDING_SHARE)
    return {**figures, "hiding": hiding}


def pooled(runs: list[dict[str, Any]]) -> dict[str, Any]:
    hidings = [r["hiding"] for r in runs if r["hiding"] is not None]
    reporting = sum(h["rate_when_reporting"] for h in hidings)
    hiding = sum(h["rate_when_hiding"] for h in hidings)
    penalties = [r["checkpointer_penalty"] for r in runs if r["checkpointer_penalty"] is not None]
    ratios = [r["checkpointer_cost_ratio"] for r in runs]
    ratios = [r for r in ratios if r is not None]
    return {
        "lost": sum(r["lost_gpu_hours"] for r in runs),
        "avoidable": _share(
            sum(r["clairvoyant_lost_gpu_hours_at_the_same_reclaims"] for r in runs),
            sum(r["lost_gpu_hours_at_reclaims"] for r in runs),
        ),
        "interruptions": sum(r["interruptions"] for r in runs),
        "penalty": f"{statistics.mean(penalties):.2f}" if penalties else "-",
        "cost_ratio": f"{statistics.mean(ratios):.2f}" if ratios else "-",
        "hiding_gain": f"{1 - hiding / reporting:.3f}" if reporting else "-",
        "reinterrupted": sum(r["reinterrupted_within_min_runtime"] for r in runs),
        "warnings": sum(r["risk_warnings"]["warnings"] for r in runs),
        "precision_15": _weighted(runs, "precision_within_15_min", "warnings"),
        "recall": _weighted(runs, "recall", None),
        "od_p99": max((r["on_demand_p99_wait_s"] or 0 for r in runs), default=0),
        "credit_share": _share_of(
            sum(Decimal(r["lost_work_credit_usd"]) for r in runs),
            sum(Decimal(r["revenue_interruptible_usd"]) for r in runs),
        ),
    }


def _share_of(part: Decimal, whole: Decimal) -> str:
    return f"{100 * part / whole:.2f} %" if whole else "-"


def _weighted(runs: list[dict[str, Any]], figure: str, weight: str | None) -> str:
    """A share pooled over seeds: weighted by the risk figure `weight` (None: interruptions)."""
    pairs = [
        (r["risk_warnings"][figure], r["risk_warnings"][weight] if weight else r["interruptions"])
        for r in runs
    ]
    total = sum(w for v, w in pairs if v is not None)
    return f"{sum(v * w for v, w in pairs if v is not None) / total:.3f}" if total else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trace", default=f"alibaba:{ALIBABA}")
    parser.add_argument(
        "--fleet-scale", type=float, default=None, help="default 0.005 on Alibaba, else 1"
    )
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--policy", action="append", default=None)
    parser.add_argument(
        "--on-demand-hold-s",
        type=int,
        default=SchedulerConfig().on_demand_hold_s,
        help="0 turns the on-demand hold off (the world before it: docs/simulation.md)",
    )
    parser.add_argument(
        "--risk-warnings",
        choices=("on", "off"),
        default="on",
        help="off: no preemption-risk warnings (and no early saves): risk_window_s 0",
    )
    args = parser.parse_args()
    window_s = SchedulerConfig().risk_window_s if args.risk_warnings == "on" else 0
    seeds = [int(s) for s in args.seeds.split(",")]
    specs = args.policy or list(DEFAULT_POLICIES)
    if args.fleet_scale is None:
        args.fleet_scale = 0.005 if "alibaba" in args.trace else 1.0
    scale = f" · scale {args.fleet_scale}" if args.fleet_scale != 1.0 else ""
    print(
        f"{args.trace}{scale} · seeds {seeds} · on-demand hold {args.on_demand_hold_s} s · "
        f"risk warnings {args.risk_warnings}"
    )
    print("| policy | lost GPU-h | vs least-work-lost | vs youngest-first | avoidable at its "
          "reclaims | interruptions | checkpointer penalty (mean) | checkpointer cost ratio "
          "(mean) | hiding gain (pooled) | reinterrupted within min runtime | warnings | "
          "precision 15 min | recall | on-demand p99 wait s (worst seed) | lost-work credit "
          "(share of interruptible revenue) |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    table = {}
    for spec in specs:
        runs = [
            one_seed(
                args.trace, args.fleet_scale, s, policy_of(spec, s), args.on_demand_hold_s, window_s
            )
            for s in seeds
        ]
        table[spec] = pooled(runs)
    for spec, row in table.items():
        print(
            f"| {spec} | {row['lost']:,.1f} | {_versus(table, row, 'least-work-lost')} | "
            f"{_versus(table, row, 'youngest-first')} | {row['avoidable']} | "
            f"{row['interruptions']:,} | "
            f"{row['penalty']} | {row['cost_ratio']} | {row['hiding_gain']} | "
            f"{row['reinterrupted']} | {row['warnings']:,} | {row['precision_15']} | "
            f"{row['recall']} | {row['od_p99']:,} | {row['credit_share']} |"
        )


def _share(best: float, actual: float) -> str:
    return f"{100 * (1 - best / actual):.1f} %" if actual else "-"


def _versus(table: dict[str, dict[str, Any]], row: dict[str, Any], name: str) -> str:
    base = table.get(name, {}).get("lost")
    return f"{100 * (row['lost'] / base - 1):+.1f} %" if base else "-"


if __name__ == "__main__":
    main()
