"""A gang member: joins its gang over gloo with the variables the plane set (as `torchrun`
would read them), all-reduces its rank, writes what it saw to the shared volume, then waits
for SIGTERM and says it saved. Run by `test_gang_local.py` on the local runtime."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist


def main() -> None:
    volume = Path(os.environ["LOWCOSTGPU_VOLUME"])
    rank, world = int(os.environ["NODE_RANK"]), int(os.environ["WORLD_SIZE"])
    restart = os.environ["LOWCOSTGPU_RESTART_COUNT"]
    stop = {"now": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
    dist.init_process_group(
        "gloo", init_method="env://", rank=rank, world_size=world, timeout=timedelta(seconds=120)
    )
    total = torch.tensor([rank + 1])
    dist.all_reduce(total)
    seen = {
        key: os.environ[key]
        for key in (
            "LOWCOSTGPU_NODE_RANK",
            "LOWCOSTGPU_NUM_NODES",
            "LOWCOSTGPU_MASTER_ADDR",
            "LOWCOSTGPU_MASTER_PORT",
            "MASTER_ADDR",
            "MASTER_PORT",
            "CUDA_VISIBLE_DEVICES",
        )
    }
    seen["sum"] = str(int(total.item()))
    out = volume / f"rank{rank}-restart{restart}.json"
    out.with_suffix(".tmp").write_text(json.dumps(seen))
    out.with_suffix(".tmp").rename(out)
    while not stop["now"]:
        time.sleep(0.05)
    (volume / f"rank{rank}-restart{restart}.saved").write_text("saved")
    sys.exit(143)


if __name__ == "__main__":
    main()
