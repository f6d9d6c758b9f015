"""Sandboxed local workloads (adapters/local/sandbox.py), with real processes under bwrap.

A workload of account B probes what it must not reach — account A's volume, the token keyring,
the SQLite store, A's runtime directory, A's processes — and what it must reach: its volume,
/tmp, its GPUs. It writes what it found to its own volume, which the test reads.

These tests fail in CI (CI=true) when bwrap cannot sandbox here; elsewhere they skip.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import MISSING_COMMAND, wait_phase, workload_start
from lowcostgpu.adapters.local import LocalRuntime
from lowcostgpu.adapters.local.sandbox import SandboxPolicy, find_bwrap, probe
from lowcostgpu.ports.runtime import VolumeMount
from waiting import wait_until

PROBE = r"""
import json, os, signal, sys, time
out = os.path.join(os.environ["LOWCOSTGPU_VOLUME"], "probe.json")
def outcome(path, write=False):
    try:
        if write:
            with open(path, "w") as f:
                f.write("x")
        elif os.path.isdir(path):
            os.listdir(path)
        else:
            open(path, "rb").read(1)
        return "allowed"
    except OSError as exc:
        return "refused"
found = {"uid": os.getuid(), "gid": os.getgid(), "cuda": os.environ["CUDA_VISIBLE_DEVICES"],
         "home": os.environ["HOME"],
         "pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit())}
for name, path in json.loads(sys.argv[1]).items():
    found[name] = outcome(path)
for name, path in json.loads(sys.argv[2]).items():
    found["write " + name] = outcome(path, write=True)
with open(out + ".tmp", "w") as f:
    json.dump(found, f)
os.rename(out + ".tmp", out)
if len(sys.argv) > 3:
    def term(*_):
        open(os.path.join(os.environ["LOWCOSTGPU_VOLUME"], "term"), "w").close()
        time.sleep(float(sys.argv[3]))
        sys.exit(0)
    signal.signal(signal.SIGTERM, term)
    time.sleep(120)
"""


def sandbox_or_skip(data_dir: Path) -> SandboxPolicy:
    bwrap = find_bwrap()
    problem = "bwrap is not installed" if bwrap is None else probe(bwrap)
    if problem is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the sandbox must work in CI (.ci/services/sandbox.sh): {problem}")
        pytest.skip(f"no sandbox here: {problem}")
    assert bwrap is not None
    return SandboxPolicy(bwrap, hidden=(str(data_dir),))


class World:
    """A data directory like `serve`'s: store, keyring, volumes of two accounts, the runtime."""

    def __init__(self, root: Path) -> None:
        self.data = root / "data"
        self.data.mkdir()
        self.outside = root / "outside.txt"  # beside the data directory, in the host's /tmp
        self.outside.write_text("not for workloads")
        (self.data / "lowcostgpu.db").write_bytes(b"SQLite format 3\x00")
        (self.data / "token-keys.json").write_text('{"keys": []}')
        self.runtime = LocalRuntime(self.data / "runtime", sandbox=sandbox_or_skip(self.data))

    def volume(self, account: str, name: str) -> VolumeMount:
        path = self.data / "volumes" / account / name
        path.mkdir(parents=True, exist_ok=True)
        return VolumeMount(name, 1, str(path))

    def start(self, alloc: str, account: str, volume: VolumeMount, *argv: str) -> None:
        start = workload_start(alloc, argv, volume=volume, account_id=account)
        self.runtime.start(start)

    def probe(self, alloc: str, account: str, reads: dict[str, str], writes: dict[str, str],
              *extra: str) -> dict[str, object]:  # fmt: skip
        volume = self.volume(account, f"v-{alloc}")
        argv = (sys.executable, "-c", PROBE, json.dumps(reads), json.dumps(writes), *extra)
        self.start(alloc, account, volume, *argv)
        result = Path(volume.path) / "probe.json"
        wait_until(result.exists, what=f"{alloc}'s probe")
        return dict(json.loads(result.read_text()))


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    w = World(tmp_path)
    yield w
    for report in w.runtime.observe():
        if report.phase in ("running", "starting"):
            w.runtime.kill(report.allocation_id)


def test_a_workload_of_one_account_reaches_nothing_of_another_nor_of_the_server(
    world: World,
) -> None:
    a_volume = world.volume("acct-a", "secret-work")
    (Path(a_volume.path) / "weights.bin").write_bytes(b"A's data")
    world.start("a-1", "acct-a", a_volume, "sleep", "60")
    wait_phase(world.runtime, "a-1", "running")
    a_pid = json.loads((world.data / "runtime" / "a-1" / "workload.json").read_text())["pid"]
    reads = {
        "a volume": a_volume.path,
        "a volume file": str(Path(a_volume.path) / "weights.bin"),
        "keyring": str(world.data / "token-keys.json"),
        "store": str(world.data / "lowcostgpu.db"),
        "a runtime dir": str(world.data / "runtime" / "a-1"),
        "a spec (its token)": str(world.data / "runtime" / "a-1" / "spec.json"),
        "a process env": f"/proc/{a_pid}/environ",
        "a file of the host's /tmp": str(world.outside),
    }
    found = world.probe("b-1", "acct-b", reads, {})
    assert {name: found[name] for name in reads} == dict.fromkeys(reads, "refused")
    assert found["pids"] == [1, 2]  # its own pid namespace: bwrap's init and itself


def test_a_workload_writes_only_its_volume_and_tmp_as_its_accounts_own_uid(world: World) -> None:
    writes = {
        "volume": "{volume}/out.txt",
        "tmp": "/tmp/scratch",
        "etc": "/etc/lowcostgpu-test",
        "usr": "/usr/lowcostgpu-test",
        "root": "/lowcostgpu-test",
        "python": os.path.join(sys.prefix, "lowcostgpu-test"),
    }
    volume = world.volume("acct-b", "v-b-2")
    writes["volume"] = f"{volume.path}/out.txt"
    found = world.probe("b-2", "acct-b", {}, writes)
    allowed = {k: found[f"write {k}"] for k in writes}
    assert allowed == {
        "volume": "allowed",
        "tmp": "allowed",
        "etc": "refused",
        "usr": "refused",
        "root": "refused",
        "python": "refused",
    }
    uid = found["uid"]
    assert isinstance(uid, int) and uid >= 200_000 and found["gid"] == uid
    st = os.stat(volume.path)
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (uid, 0o700)
    assert os.stat(Path(volume.path) / "out.txt").st_uid == uid
    assert found["home"] == "/tmp"


def test_each_account_has_its_own_uid_kept_across_runs(world: World) -> None:
    uids = {alloc: world.probe(alloc, acct, {}, {})["uid"] for alloc, acct in
            [("u-1", "acct-a"), ("u-2", "acct-b"), ("u-3", "acct-a")]}  # fmt: skip
    assert uids["u-1"] == uids["u-3"] != uids["u-2"]
    again = LocalRuntime(world.data / "runtime", sandbox=sandbox_or_skip(world.data))
    world.runtime = again  # a restarted server
    assert world.probe("u-4", "acct-b", {}, {})["uid"] == uids["u-2"]


def test_a_workload_gets_its_gpus_in_cuda_visible_devices(world: World) -> None:
    found = world.probe("g-1", "acct-g", {}, {})
    assert found["cuda"] == "0,2"  # the harness's allocation; no /dev/nvidia* here to renumber


@pytest.mark.parametrize(
    ("grace_work_s", "signal_after_s", "exit_code"),
    [(0.2, None, 0), (60, 1.0, 137)],  # leaves within its grace / killed when the grace is over
)
def test_sigterm_reaches_the_workload_and_its_grace_is_kept(
    world: World, grace_work_s: float, signal_after_s: float | None, exit_code: int
) -> None:
    world.probe("t-1", "acct-t", {}, {}, str(grace_work_s))
    wait_phase(world.runtime, "t-1", "running")
    world.runtime.signal("t-1", "SIGTERM")
    volume = Path(world.volume("acct-t", "v-t-1").path)
    wait_until((volume / "term").exists, what="the workload's SIGTERM handler")
    if signal_after_s is not None:
        world.runtime.kill("t-1")  # what the control plane does once the grace is over
    report = wait_phase(world.runtime, "t-1", "exited")
    assert report.exit_code == exit_code


def test_a_plain_command_dies_of_sigterm_with_143(world: World) -> None:
    world.start("s-1", "acct-s", world.volume("acct-s", "v"), "sleep", "60")
    wait_phase(world.runtime, "s-1", "running")
    world.runtime.signal("s-1", "SIGTERM")
    assert wait_phase(world.runtime, "s-1", "exited").exit_code == 143


@pytest.mark.parametrize(
    ("argv", "reason"),
    [
        ((MISSING_COMMAND,), f"cannot start command {MISSING_COMMAND!r}: no such file"),
        (("./notes.txt",), "cannot start command './notes.txt': permission denied"),
    ],
)
def test_a_command_that_cannot_run_in_the_sandbox_is_a_start_failure_with_its_reason(
    world: World, argv: tuple[str, ...], reason: str
) -> None:
    volume = world.volume("acct-f", "v")
    (Path(volume.path) / "notes.txt").write_text("not a program")  # mode 0644
    world.start("f-1", "acct-f", volume, *argv)
    report = wait_phase(world.runtime, "f-1", "start_failed")
    assert report.reason.startswith(reason)
