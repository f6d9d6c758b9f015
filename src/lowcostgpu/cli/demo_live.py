"""`lowcostgpu demo`: the product page's terminal session, for real, in under two minutes.

A throw-away control plane (a temp directory, SQLite, the local runtime, one host with one A100)
runs a real `pytorch` training run as an interruptible instance. Once it has checkpointed, an
on-demand instance needs that GPU: the training gets its notice (SIGTERM, a 10 s grace period),
checkpoints the step it is at, exits, and waits in the queue; when the on-demand work ends it
restarts from its volume and resumes from that same step, finishes, and the bill is printed from
the meter: GPU-hours, storage, exact and rounded amounts, savings against on-demand.

Everything goes through the HTTP API with the client the CLI uses; nothing is scripted but the
two launches.

With `--runtime slurm` the same session runs on a Slurm cluster (`SlurmDemo`): each run is a
Slurm job. The demo's fleet is one node of the partition, the first idle one with a GPU, as an
A100 host with the node's GPU count; the on-demand launch asks for all of them, so it must take
the GPU the training holds, whatever the node has. Without `--slurm-conf` or `SLURM_CONF` it starts
a throw-away cluster on this machine (`scripts/slurm-lab.sh`: one node, one GPU) when it can —
root, Debian's Slurm packages, a source checkout — and says so; else it says how to get one.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

from lowcostgpu.adapters.slurm import Slurm, lab
from lowcostgpu.adapters.slurm.fleet import partition_nodes
from lowcostgpu.api.server import Running, start
from lowcostgpu.bootstrap.serve import ServeOptions, connect_slurm
from lowcostgpu.cli.timeline import Timeline
from lowcostgpu.client.api import Client
from lowcostgpu.domain.errors import ConfigError, LowcostgpuError, Unavailable

FLEET_OF = """
[[region]]
name = "eu-west"
  [[region.hosts]]
  name = "{host}"
  gpu_type = "a100-sxm4"
  gpus = {gpus}
"""
FLEET = FLEET_OF.format(host="demo-box", gpus=1)
TRAIN_ARGS = ["--steps", "120", "--every-steps", "20", "--step-delay-s", "0.1"]
RECLAIM_AFTER_STEP = 40
GRACE_PERIOD_S = 10
ON_DEMAND_S = 6
TIMEOUT_S = 240


@dataclass(frozen=True, slots=True)
class SlurmDemo:
    """Where `demo --runtime slurm` runs: a cluster (None: $SLURM_CONF, else a throw-away lab),
    its partition, and a directory every node mounts (None: a temporary one on this machine)."""

    conf: Path | None = None
    partition: str = "lowcostgpu"
    shared_dir: Path | None = None

    @classmethod
    def of(
        cls, runtime: str, conf: Path | None, partition: str, shared_dir: Path | None
    ) -> SlurmDemo:
        if runtime != "slurm":
            raise ConfigError(
                f"the demo cannot run on runtime {runtime!r}", hint="use --runtime local or slurm"
            )
        return cls(conf, partition, shared_dir)


@dataclass
class _Place:
    """What one demo made and must remove: its directories, and the lab it started, if any."""

    dirs: list[Path]
    lab: Path | None = None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_live_demo(
    say: Callable[[str], None], keep: bool = False, slurm: SlurmDemo | None = None
) -> dict[str, object]:
    """Play the session; returns what happened (for tests): steps, usage, bill (and with
    `slurm`, the Slurm jobs of the training run)."""
    tmp = Path(tempfile.mkdtemp(prefix="lowcostgpu-demo-"))
    place = _Place([tmp])
    admin_key = "lcg_admin_" + secrets.token_urlsafe(24)
    options = ServeOptions(
        data_dir=tmp / "data", fleet=tmp / "fleet.toml", port=_free_port(), admin_key=admin_key
    )
    running: Running | None = None
    try:
        if slurm is None:
            (tmp / "fleet.toml").write_text(FLEET)
            gpus = 1
        else:
            options, gpus = _on_slurm(options, slurm, place, say)
        say(f"# a throw-away control plane at {options.url} (data in {tmp})")
        running = start(options)
        result = _session(running, admin_key, say, gpus)
        if slurm is not None:
            result["slurm_jobs"] = _slurm_jobs(options, result, say)
        return result
    finally:
        _cleanup(running, place, keep)


def _on_slurm(
    options: ServeOptions, slurm: SlurmDemo, place: _Place, say: Callable[[str], None]
) -> tuple[ServeOptions, int]:
    """The demo's options on Slurm, and the GPU count of its one host (the demo's fleet: the
    first idle node of the partition with a GPU, as an A100 host with all its GPUs)."""
    conf = slurm.conf or (Path(os.environ["SLURM_CONF"]) if os.environ.get("SLURM_CONF") else None)
    if conf is None:
        conf = _start_lab(place, say)
    if slurm.shared_dir is not None:
        slurm.shared_dir.mkdir(parents=True, exist_ok=True)
        place.dirs.append(Path(tempfile.mkdtemp(prefix="lowcostgpu-demo-", dir=slurm.shared_dir)))
    shared = place.dirs[-1] if slurm.shared_dir is not None else place.dirs[0] / "shared"
    options = ServeOptions(
        data_dir=options.data_dir,
        fleet=options.fleet,
        port=options.port,
        admin_key=options.admin_key,
        runtime="slurm",
        slurm_conf=conf,
        partition=slurm.partition,
        slurm_shared_dir=shared,
    )
    cluster = connect_slurm(options)  # the clear errors of `serve`: no conf, down, no partition
    assert cluster is not None
    host, gpus = _demo_host(cluster, slurm.partition)
    assert options.fleet is not None
    options.fleet.write_text(FLEET_OF.format(host=host, gpus=gpus))
    say(f"# on Slurm ({cluster.where}, partition {slurm.partition}): host {host}, {gpus} GPU(s)")
    return options, gpus


def _demo_host(cluster: Slurm, partition: str) -> tuple[str, int]:
    for node in partition_nodes(cluster, partition):
        if node.gpus >= 1 and node.state.lower().rstrip("*~#!%$@^-+") == "idle":
            return node.name, node.gpus
    raise Unavailable(
        f"partition {partition!r} of {cluster.where} has no idle node with a GPU for the demo",
        hint=f"wait for one (`sinfo -N -p {partition}`), or give another --partition",
    )


def _start_lab(place: _Place, say: Callable[[str], None]) -> Path:
    """A throw-away cluster on this machine (one node, one GPU), or why there can be none."""
    why = lab.why_not_here()
    if why is not None:
        raise ConfigError(
            f"no Slurm cluster given (--slurm-conf or SLURM_CONF), and none can be made here: "
            f"{why}",
            hint="give your cluster's slurm.conf with --slurm-conf; or, as root in a checkout "
            f"of lowcostgpu: {lab.INSTALL}, then run the demo again (it starts a throw-away "
            "cluster)",
        )
    root = Path(tempfile.mkdtemp(prefix="lowcostgpu-demo-slurm-"))
    place.dirs.append(root)
    conf = lab.start(root, nodes=1, gpus=1)
    place.lab = root
    say(f"# no Slurm cluster given: a throw-away one here (scripts/slurm-lab.sh, in {root})")
    return conf


def _slurm_jobs(
    options: ServeOptions, result: dict[str, object], say: Callable[[str], None]
) -> list[dict[str, str]]:
    """The Slurm jobs of the training run, as Slurm lists them (it keeps ended jobs for
    `MinJobAge`): a job per run, each named by its allocation, on the demo's host."""
    instance = result["instance"]
    assert isinstance(instance, dict)
    cluster = Slurm(options.slurm_conf)
    argv = ["squeue", "-h", "-a", "-t", "all", "-p", options.partition, "-o", "%i|%N|%T|%k"]
    out = cluster.run(argv, what="listing the demo's Slurm jobs")
    jobs = []
    for line in out.splitlines():
        parts = line.split("|", 3)  # the comment last: it may hold a '|'
        if len(parts) != 4:
            continue
        job_id, node, state, comment = parts
        if comment == f"lowcostgpu instance {instance['id']}":
            jobs.append({"job_id": job_id, "node": node, "state": state})
    jobs.sort(key=lambda j: int(j["job_id"]))
    listed = ", ".join(f"{j['job_id']} on {j['node']} ({j['state'].lower()})" for j in jobs)
    say(f"# Slurm ran {instance['id']} as {len(jobs)} job(s): {listed}")
    return jobs


def _session(
    running: Running, admin_key: str, say: Callable[[str], None], gpus: int = 1
) -> dict[str, object]:
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
                _reclaim(api, say, gpus)
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


def _reclaim(api: Client, say: Callable[[str], None], gpus: int) -> None:
    """On-demand work that needs every GPU of the host: the training's one among them."""
    on_demand = api.launch(
        gpu="a100-sxm4",
        type="on-demand",
        gpus=gpus,
        command=["sleep", str(ON_DEMAND_S)],
        grace_period_s=GRACE_PERIOD_S,
    )
    count = f" --gpus {gpus}" if gpus > 1 else ""
    say(f"$ lowcostgpu launch --gpu a100-sxm4{count} --type on-demand -- sleep {ON_DEMAND_S}")
    needs = "the GPU" if gpus == 1 else f"all {gpus} GPUs of the host"
    say(f"# on-demand {on_demand['id']} needs {needs}: the interruptible run is reclaimed")


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


def _cleanup(running: Running | None, place: _Place, keep: bool) -> None:
    if running is not None:
        runtime = running.wired.plane.runtime
        with suppress(LowcostgpuError):
            for report in runtime.observe():
                with suppress(LowcostgpuError):
                    runtime.kill(report.allocation_id)
        running.stop()
    if place.lab is not None:  # its daemons stop; with --keep its files stay
        lab.stop(place.lab)
    if keep:
        return
    mounts = Path("/proc/mounts").read_text() if Path("/proc/mounts").exists() else ""
    for line in mounts.splitlines():
        point = line.split()[1]
        if any(point.startswith(str(d)) for d in place.dirs):
            subprocess.run(["umount", point], check=False, capture_output=True)
    for directory in place.dirs:
        shutil.rmtree(directory, ignore_errors=True)
