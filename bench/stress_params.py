"""What the stress trace (`sim/stress.py`) takes from the Alibaba GPU trace: print it.

    .venv/bin/python bench/stress_params.py [../shared/data/alibaba-gpu-v2023]

Reads `openb_pod_list_default.csv` and `openb_node_list_gpu_node.csv` (cluster-trace-gpu-v2023,
Weng et al., ATC'23) and prints, for the GPU pods that ran (scheduled, `num_gpu` ≥ 1):
- the share of pods (and of GPU-hours) per GPU count;
- the lifetime (`deletion_time − scheduled_time`) distribution: quantiles, and a lognormal fit
  (median, and sigma both from the log-standard deviation and from the p50–p90 ratio), for all
  pods, for BE (best-effort: the interruptible kind) and for LS (latency-sensitive);
- the hour-of-day curve of pod creations (trace second mod 86,400, so hour 0 is the trace's own
  start hour; the trace gives no clock time): multipliers of the mean, and the peak ÷ mean;
- the nodes per GPU count.
Pods still running at the end of the trace are cut there (their lifetime is a lower bound), as
the simulator's Alibaba reader does; the script says how many there are. Takes a few seconds.
"""

from __future__ import annotations

import csv
import math
import statistics
import sys
from collections import Counter
from pathlib import Path

DEFAULT_DIR = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "alibaba-gpu-v2023"


def rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def quantile(sorted_values: list[float], q: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def lognormal_fit(hours: list[float]) -> str:
    values = sorted(hours)
    logs = [math.log(v) for v in values]
    p50, p90, p99 = (quantile(values, q) for q in (0.5, 0.9, 0.99))
    sigma_sd = statistics.pstdev(logs)
    sigma_q = math.log(p90 / p50) / 1.2816  # z of the 90th percentile
    return (
        f"n={len(values):,} median {p50:.3f} h · p90 {p90:.2f} h · p99 {p99:.1f} h · "
        f"max {values[-1]:.0f} h · mean {statistics.fmean(values):.2f} h · "
        f"sigma(log sd) {sigma_sd:.2f} · sigma(p90/p50) {sigma_q:.2f}"
    )


def describe(curve: list[float]) -> None:
    peak, trough = max(curve), min(curve)
    print(
        f"  peak ÷ mean {peak:.2f} (hour {curve.index(peak)}), "
        f"trough ÷ mean {trough:.2f} (hour {curve.index(trough)})"
    )


def main(directory: Path) -> None:
    pods = rows(directory / "openb_pod_list_default.csv")
    end = max(int(p["deletion_time"] or 0) for p in pods)
    ran = [p for p in pods if int(p["num_gpu"] or 0) > 0 and p["scheduled_time"]]
    lifetime_h = {
        p["name"]: max(1, int(p["deletion_time"]) - int(p["scheduled_time"])) / 3600 for p in ran
    }
    print(f"GPU pods that ran: {len(ran):,} of {len(pods):,} pods; trace end {end:,} s")
    still = sum(p["deletion_time"] == str(end) for p in ran)
    print(f"  still running at the end (cut there): {still:,}")
    by_gpus = Counter(int(p["num_gpu"]) for p in ran)
    gpu_h = Counter[int]()
    for p in ran:
        gpu_h[int(p["num_gpu"])] += int(p["num_gpu"]) * lifetime_h[p["name"]]
    total_h = sum(gpu_h.values())
    for gpus in sorted(by_gpus):
        print(
            f"  {gpus} GPU: {by_gpus[gpus]:,} pods ({by_gpus[gpus] / len(ran):.2%}), "
            f"{gpu_h[gpus] / total_h:.2%} of GPU-hours"
        )
    print("lifetime (scheduled → deleted), lognormal fit:")
    for label, chosen in (
        ("all", ran),
        ("BE", [p for p in ran if p["qos"] == "BE"]),
        ("LS", [p for p in ran if p["qos"] == "LS"]),
    ):
        print(f"  {label}: " + lognormal_fit([lifetime_h[p["name"]] for p in chosen]))
    hours = Counter(int(p["creation_time"]) % 86400 // 3600 for p in ran)
    mean = len(ran) / 24
    curve = [hours[h] / mean for h in range(24)]
    print("creations per hour of day ÷ the mean (hour 0 = the trace's start hour):")
    print("  " + ", ".join(f"{m:.2f}" for m in curve))
    describe(curve)
    smooth = [(curve[h - 1] + curve[h] + curve[(h + 1) % 24]) / 3 for h in range(24)]
    print("the same, averaged over 3 hours (h−1, h, h+1; what sim/stress.py uses):")
    print("  " + ", ".join(f"{m:.2f}" for m in smooth))
    describe(smooth)
    nodes = Counter(int(n["gpu"]) for n in rows(directory / "openb_node_list_gpu_node.csv"))
    print("nodes per GPU count: " + ", ".join(f"{g} GPU: {nodes[g]:,}" for g in sorted(nodes)))


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_DIR)
