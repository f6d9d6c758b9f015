"""The store codec: microseconds to decode (`loads`) and encode (`dumps`) one InstanceState.

    .venv/bin/python bench/codec.py
    git show HEAD:src/lowcostgpu/adapters/store/codec.py > /tmp/codec_old.py
    .venv/bin/python bench/codec.py --against /tmp/codec_old.py   # an older codec too

`--against` loads one file. A codec.py from before the decoders moved to codec_decoders.py
holds its own; a later one decodes with the codec_decoders.py checked out here.

Two realistic rows: a running instance three runs in (two closed, one open; a checkpoint, an
interruption behind it) and a queued one (defaults, as the engine enqueues it). Every row the
store keeps is written with every field, so both texts hold all 29 fields. `loads` includes
`json.loads`; `dumps` includes `json.dumps`. A server taking the lead decodes every live instance
(110,000 at the design size) before it serves, and list endpoints decode a page on every request.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import time
from collections.abc import Callable
from functools import partial
from types import ModuleType
from typing import Any

from lowcostgpu.adapters.store import codec
from lowcostgpu.core.lifecycle import InstanceState, Run
from lowcostgpu.domain.capacity import CapacityClass, PoolKey
from lowcostgpu.domain.status import InstanceStatus

T0 = 1_700_000_000
RUNNING = InstanceState(
    id="i-0f3a9c2e7b",
    account_id="acct-4821",
    pool=PoolKey("eu-west", "H100"),
    gpus=8,
    capacity_class=CapacityClass.INTERRUPTIBLE,
    status=InstanceStatus.RUNNING,
    grace_period_s=120,
    enqueued_at=T0,
    restart_count=2,
    placement_count=3,
    allocation_id="alloc-77120",
    host_id="host-eu-west-0042",
    gpu_indices=(0, 1, 2, 3, 4, 5, 6, 7),
    started_at=T0 + 7_300,
    last_checkpoint_step=48_000,
    last_checkpoint_at=T0 + 9_000,
    interruption_count=2,
    last_interrupted_at=T0 + 7_000,
    runs=(
        Run("alloc-70001", T0 + 60, T0 + 3_600),
        Run("alloc-73315", T0 + 3_700, T0 + 7_000),
        Run("alloc-77120", T0 + 7_300),
    ),
)
QUEUED = InstanceState(
    id="i-1b7d4e0a55",
    account_id="acct-4821",
    pool=PoolKey("us-east", "A100-80GB"),
    gpus=1,
    capacity_class=CapacityClass.ON_DEMAND,
    enqueued_at=T0 + 9_100,
)


def per_call_us(fn: Callable[[], Any], n: int, repeats: int) -> tuple[float, float]:
    """Median and best of `repeats` timings of `n` calls, in µs per call."""
    runs = []
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(n):
            fn()
        runs.append((time.perf_counter() - t) / n * 1e6)
    return statistics.median(runs), min(runs)


def load(path: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location("codec_against", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--against", metavar="PATH", help="another codec.py to time as well")
    ap.add_argument("-n", type=int, default=5_000, help="calls per timing")
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    codecs: list[tuple[str, Any]] = [("current", codec)]
    if args.against:
        codecs.insert(0, (args.against, load(args.against)))
    print(f"µs per call, median / best of {args.repeats} × {args.n}")
    for label, c in codecs:
        for name, s in (("running, 3 runs", RUNNING), ("queued", QUEUED)):
            text = c.dumps(s)
            assert c.loads(InstanceState, text) == s and text == codec.dumps(s)
            dec = per_call_us(partial(c.loads, InstanceState, text), args.n, args.repeats)
            enc = per_call_us(partial(c.dumps, s), args.n, args.repeats)
            print(
                f"{label:>22} | {name:<16} | loads {dec[0]:7.1f} / {dec[1]:7.1f}"
                f" | dumps {enc[0]:6.1f} / {enc[1]:6.1f}"
            )
    text = codec.dumps(RUNNING)
    n = 110_000
    t = time.perf_counter()
    for _ in range(n):
        codec.loads(InstanceState, text)
    print(f"current: {n:,} running instances decoded in {time.perf_counter() - t:.2f} s")


if __name__ == "__main__":
    main()
