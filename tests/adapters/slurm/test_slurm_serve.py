"""`lowcostgpu serve --runtime slurm` on the session's real Slurm lab: it starts, an instance runs
as a Slurm job on its host; a bad conf, a slurmctld that does not answer, a partition that is
not there or a fleet that is not the cluster's is one clear error before any state is written."""

from __future__ import annotations

import secrets
import socket
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

import slurm_lab
from lowcostgpu.adapters.slurm import SlurmRuntime
from lowcostgpu.api.server import start
from lowcostgpu.bootstrap.serve import ServeOptions
from lowcostgpu.cli.main import app
from lowcostgpu.client.api import Client
from waiting import wait_until

FLEET = '[[region]]\nname = "eu"\n  [[region.hosts]]\n  name = "{name}"\n  gpu_type = "a100-sxm4"\n'


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_serve_on_slurm_runs_an_instance_as_a_slurm_job_on_its_host(tmp_path: Path) -> None:
    lab = slurm_lab.require()
    admin_key = "lcg_admin_" + secrets.token_urlsafe(16)
    options = ServeOptions(
        data_dir=tmp_path / "data",
        port=_free_port(),
        admin_key=admin_key,
        runtime="slurm",
        slurm_conf=lab.conf,
        fleet_from_slurm=True,
        region="eu",
        slurm_gpu_type="a100-sxm4",
        slurm_shared_dir=lab.shared / tmp_path.name,
    )
    running = start(options)
    try:
        plane = running.wired.plane
        assert [(h.id, h.gpu_count) for h in plane.hosts] == [
            (name, slurm_lab.GPUS) for name in lab.hosts
        ]
        runtime = plane.runtime
        assert isinstance(runtime, SlurmRuntime)
        assert runtime.state_dir == (lab.shared / tmp_path.name / "runtime").resolve()
        with Client(running.url, admin_key) as admin:
            account = admin.create_account("slurm")
            admin.topup(account["id"], "5.00")
        with Client(running.url, account["api_key"]) as api:
            inst = api.launch(
                gpu="a100-sxm4",
                type="on-demand",
                gpus=2,
                volume="data:1GB",
                command=["sh", "-c", 'echo "gpus=$CUDA_VISIBLE_DEVICES on $(pwd)"'],
            )
            done = wait_until(
                lambda: (i := api.instance(inst["id"]))["status"] in ("succeeded", "failed") and i,
                what="the instance ends",
            )
            assert done["status"] == "succeeded", done
            log = api.logs(inst["id"])
        assert "gpus=0,1 on " in log and str(lab.shared / tmp_path.name / "volumes") in log, log
        jobs = lab.run("squeue", "-h", "-a", "-t", "all", "-o", "%N|%T|%k").splitlines()
        ran = [j.split("|")[0] for j in jobs if j.endswith(f"|lowcostgpu instance {inst['id']}")]
        assert len(ran) == 1 and ran[0] in lab.hosts, jobs  # one job, on a host of the fleet
        assert f"{ran[0]}|COMPLETED|lowcostgpu instance {inst['id']}" in jobs, jobs
    finally:
        running.stop()
        _unmount_under(lab.shared / tmp_path.name)  # the volume's loop mount, as root


def _unmount_under(directory: Path) -> None:
    for line in Path("/proc/mounts").read_text().splitlines():
        point = line.split()[1]
        if point.startswith(f"{directory}/"):
            subprocess.run(["umount", point], check=False, capture_output=True)


def _serve(tmp_path: Path, *options: str) -> tuple[int, str, Path]:
    data = tmp_path / "data"
    argv = ["serve", "--runtime", "slurm", "--data-dir", str(data), *options]
    result = CliRunner().invoke(app, argv)
    assert "Traceback" not in result.output
    return result.exit_code, " ".join(result.output.split()), data


def test_a_missing_slurm_conf_is_refused_at_once_naming_it(tmp_path: Path) -> None:
    code, output, data = _serve(
        tmp_path, "--slurm-conf", str(tmp_path / "nope.conf"), "--fleet-from-slurm"
    )
    assert code == 2, output
    assert f"the Slurm configuration {tmp_path / 'nope.conf'} does not exist" in output
    assert "--slurm-conf" in output
    assert not data.exists()


def test_a_slurm_conf_that_slurm_cannot_parse_is_refused(tmp_path: Path) -> None:
    slurm_lab.require()
    conf = tmp_path / "slurm.conf"
    conf.write_text("garbage line\n")
    code, output, data = _serve(tmp_path, "--slurm-conf", str(conf), "--fleet-from-slurm")
    assert code == 2, output
    assert f"the Slurm cluster of {conf} cannot be used" in output, output
    assert "Unable to process configuration file" in output, output
    assert not data.exists()


def test_a_slurmctld_that_does_not_answer_is_refused(tmp_path: Path) -> None:
    lab = slurm_lab.require()
    conf = tmp_path / "slurm.conf"
    text = lab.conf.read_text().splitlines()
    conf.write_text(
        "\n".join(
            f"SlurmctldPort={_free_port()}" if line.startswith("SlurmctldPort=") else line
            for line in text
        )
    )
    code, output, data = _serve(tmp_path, "--slurm-conf", str(conf), "--fleet-from-slurm")
    assert code == 2, output
    assert "is down: `scontrol ping` cannot reach it" in output, output
    assert not data.exists()


@pytest.mark.parametrize(
    ("options", "words"),
    [
        (["--partition", "nope", "--fleet-from-slurm"], "has no partition 'nope'"),
        ([], "--runtime slurm needs the fleet of the partition"),
        (["--fleet-from-slurm"], "does not say the GPU type of node(s) node1, node2, node3"),
        (["--fleet", "{fleet}"], "host eu-a100 is not a node of the partition"),
    ],
    ids=["no-partition", "no-fleet", "untyped-nodes", "fleet-not-the-cluster"],
)
def test_a_cluster_that_does_not_fit_is_refused_before_any_state(
    tmp_path: Path, options: list[str], words: str
) -> None:
    lab = slurm_lab.require()
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(FLEET.format(name="eu-a100") + "  gpus = 8\n")
    options = [o.replace("{fleet}", str(fleet)) for o in options]
    code, output, data = _serve(tmp_path, "--slurm-conf", str(lab.conf), *options)
    assert code == 2, output
    assert words in output, output
    assert not data.exists()


def test_fleet_from_slurm_needs_the_slurm_runtime(tmp_path: Path) -> None:
    data = tmp_path / "data"
    result = CliRunner().invoke(app, ["serve", "--fleet-from-slurm", "--data-dir", str(data)])
    assert result.exit_code == 2, result.output
    assert "--fleet-from-slurm needs --runtime slurm" in " ".join(result.output.split())
    assert not data.exists()
