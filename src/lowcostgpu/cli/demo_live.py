"""`lowcostgpu demo`: the product page's terminal session, for real, in under two minutes.

A throw-away control plane (a temp directory, SQLite, the local runtime, one host with one A100)
runs a real `pytorch` training run as an interruptible instance. Once it has checkpointed, an
on-demand instance needs that GPU: the training gets its notice (SIGTERM, a 10 s grace period),
checkpoints the step it is at, exits, and waits in the queue; when the on-demand work ends it
restarts from its volume and resumes from that same step, finishes, and the bill is printed from
the meter: GPU-hours, storage, exact and rounded amounts, savings against on-demand.

Everything goes through the HTTP API with the client the CLI uses; nothing is scripted but the
two launches.
"""

from __future__ import annotations

import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path

from lowcostgpu.api.server import Running, start
from lowcostgpu.bootstrap.serve import ServeOptions
from lowcostgpu.cli.timeline import Timeline
from lowcostgpu.client.api import Client
from lowcostgpu.domain.errors import LowcostgpuError, Unavailable

FLEET = """
[[region]]
name = "eu-west"
  [[region.hosts]]
  name = "demo-box"
  gpu_type = "a100-sxm4"
  gpus = 1
"""
TRAIN_ARGS = ["--steps", "120", "--every-steps", "20", "--step-delay-s", "0.1"]
RECLAIM_AFTER_STEP = 40
GRACE_PERIOD_S = 10
ON_DEMAND_S = 6
TIMEOUT_S = 240


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_live_demo(say: Callable[[str], None], keep: bool = False) -> dict[str, object]:
    """Play the session; returns what happened (for tests): steps, usage, bill."""
    tmp = Path(tempfile.mkdtemp(prefix="lowcostgpu-demo-"))
    (tmp / "fleet.toml").write_text(FLEET)
    admin_key = "lcg_admin_" + secrets.token_urlsafe(24)
    options = ServeOptions(
        data_dir=tmp / "data", fleet=tmp / "fleet.toml", port=_free_port(), admin_key=admin_key
    )
    say(f"# a throw-away control plane at {options.url} (data in {tmp})")
    running = start(options)
    try:
        return _session(running, admin_key, say)
    finally:
        _cleanup(running, tmp, keep)


def _session(running: Running, admin_key: str, say: Callable[[str], None]) -> dict[str, object]:
    with Client(running.url, admin_key) as admin:
        created = admin.create_account("demo")
        admin.topup(created["id"], "10.00")
    say(f"# account {created['id']} with a prepaid balance of $10.00")
    with Client(running.url, created["api_key"]) as api:
        say("$ lowcostgpu launch --gpu a100-sxm4 --type interruptible --template pytorch \\")
        say(f"    --volume ckpts:1GB -- {' '.join(TRAIN_ARGS)}")
        inst = api.launch(
            gpu="a100-sxm4",
            type="interruptible",
            template="pytorch",
            command=TRAIN_ARGS,
            volume="ckpts:1GB",
            grace_period_s=GRACE_PERIOD_S,
        )
        timeline = Timeline(api, inst, say)
        deadline = time.monotonic() + TIMEOUT_S
        reclaimed = False
        while timeline.poll()["status"] not in ("succeeded", "failed", "stopped"):
            if time.monotonic() > deadline:
                raise Unavailable(f"the demo run did not finish within {TIMEOUT_S} s")
            step = timeline.instance["last_checkpoint_step"] or 0
            if not reclaimed and step >= RECLAIM_AFTER_STEP:
                reclaimed = True
                _reclaim(api, say)
            time.sleep(0.3)
        usage = timeline.finish()
        bill = api.bill()
        resumed_log = _resumed_from(api.logs(inst["id"]))
    _print_bill(bill, say)
    return {
        "instance": timeline.instance,
        "interrupted_step": timeline.interrupted_step,
        "resumed_step": timeline.resumed_step,
        "workload_resumed_from": resumed_log,
        "usage": usage,
        "bill": bill,
    }


def _reclaim(api: Client, say: Callable[[str], None]) -> None:
    on_demand = api.launch(
        gpu="a100-sxm4",
        type="on-demand",
        command=["sleep", str(ON_DEMAND_S)],
        grace_period_s=GRACE_PERIOD_S,
    )
    say(f"$ lowcostgpu launch --gpu a100-sxm4 --type on-demand -- sleep {ON_DEMAND_S}")
    say(f"# on-demand {on_demand['id']} needs the GPU: the interruptible run is reclaimed")


def _resumed_from(log: str) -> int | None:
    """The step the workload itself says it resumed from (`resumed from step N`)."""
    for line in reversed(log.splitlines()):
        if line.startswith("resumed from step "):
            return int(line.split()[3])
    return None


def _print_bill(bill: dict[str, object], say: Callable[[str], None]) -> None:
    say("")
    say("$ lowcostgpu bill")
    lines = bill["lines"]
    assert isinstance(lines, list)
    for line in lines:
        saved = f" · saved ${line['savings']} vs on-demand" if line["kind"] == "gpu" else ""
        say(f"  {line['description']} = ${line['amount_exact']} → ${line['amount']}{saved}")
    say(
        f"  total ${bill['total']} (exact ${bill['total_exact']}) · saved ${bill['savings']}"
        f" · balance ${bill['balance']}"
    )


def _cleanup(running: Running, tmp: Path, keep: bool) -> None:
    runtime = running.wired.plane.runtime
    for report in runtime.observe():
        with suppress(LowcostgpuError):
            runtime.kill(report.allocation_id)
    running.stop()
    if keep:
        return
    mounts = Path("/proc/mounts").read_text() if Path("/proc/mounts").exists() else ""
    for line in mounts.splitlines():
        point = line.split()[1]
        if point.startswith(str(tmp)):
            subprocess.run(["umount", point], check=False, capture_output=True)
    shutil.rmtree(tmp, ignore_errors=True)
