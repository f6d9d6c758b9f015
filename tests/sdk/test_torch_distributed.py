"""Multi-node checkpoints with real processes: two torchrun members on this machine, each as if
on its own host (`--nnodes 2 --node-rank K`, one worker each, gloo on CPU), sharing one volume.

A reclaim SIGTERMs every member; the job must save one consistent step and resume, on every
rank, into exactly the losses of a run that was never interrupted.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")

from lowcostgpu.sdk.checkpoint import MARKER_NAME, read_marker, step_dir_name

SRC = Path(__file__).resolve().parents[2] / "src"
WORKER = Path(__file__).with_name("torch_distributed_worker.py")
TOTAL_STEPS = 12
DEADLINE_S = 180.0  # a watchdog for a hung rendezvous, not a timing assertion
STEP_LINE = re.compile(r"^step (\d+) loss (\S+)$")


class Member:
    """One torchrun, started with the variables the control plane gives a member."""

    def __init__(self, node_rank: int, port: int, volume: Path, restart: int, args: list[str]):
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]),
            "OMP_NUM_THREADS": "1",
            "LOWCOSTGPU_VOLUME": str(volume),
            "LOWCOSTGPU_RESTART_COUNT": str(restart),
            "LOWCOSTGPU_NODE_RANK": str(node_rank),
            "LOWCOSTGPU_NUM_NODES": "2",
            "LOWCOSTGPU_MASTER_ADDR": "127.0.0.1",
            "LOWCOSTGPU_MASTER_PORT": str(port),
        }
        torchrun = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2"]
        torchrun += ["--nproc-per-node", "1", "--node-rank", str(node_rank)]
        torchrun += ["--master-addr", "127.0.0.1", "--master-port", str(port)]
        self.proc = subprocess.Popen(
            [*torchrun, str(WORKER), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            start_new_session=True,  # its own process group, as on its own host
        )
        self.lines: list[str] = []
        self._eof = False
        self._changed = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()
        with self._changed:
            self._eof = True
            self._changed.notify_all()

    def wait_for_lines(self, count: int) -> None:
        """Until at least `count` lines are out (fails at the deadline or if it ends first)."""
        deadline = time.monotonic() + DEADLINE_S
        with self._changed:
            while len(self.lines) < count:
                left = deadline - time.monotonic()
                if self._eof or left <= 0:
                    raise AssertionError(f"waited for line {count}; output:\n{self.text}")
                self._changed.wait(left)

    def wait_for(self, wanted: str) -> None:
        """Until a line starts with the words `wanted` (`step 3` matches `step 3 loss ...`)."""
        while not any(line == wanted or line.startswith(wanted + " ") for line in self.lines):
            self.wait_for_lines(len(self.lines) + 1)

    def terminate(self) -> None:
        """SIGTERM to the member's whole process group, as at a reclaim notice."""
        with contextlib.suppress(ProcessLookupError):  # already gone: nothing to notify
            os.killpg(self.proc.pid, signal.SIGTERM)

    def wait(self) -> int:
        try:
            return self.proc.wait(DEADLINE_S)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            raise AssertionError(f"member did not exit; output:\n{self.text}") from None

    @property
    def text(self) -> str:
        with self._changed:
            return "\n".join(self.lines)

    def losses(self) -> dict[int, float]:
        return {int(m[1]): float(m[2]) for line in self.lines if (m := STEP_LINE.match(line))}


def start_job(
    volume: Path, restart: int, *args: str, total_steps: int = TOTAL_STEPS
) -> list[Member]:
    port = _free_port()
    argv = ["--total-steps", str(total_steps), *args]
    return [Member(rank, port, volume, restart, argv) for rank in range(2)]


def finish_job(members: list[Member]) -> list[int]:
    return [member.wait() for member in members]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _stopped_at(member: Member) -> int:
    [step] = re.findall(r"^interrupted at step (\d+)$", member.text, flags=re.MULTILINE)
    return int(step)


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> list[dict[int, float]]:
    """Each rank's losses in a run that is never interrupted."""
    members = start_job(tmp_path_factory.mktemp("reference"), 0)
    assert finish_job(members) == [0, 0], members[0].text + members[1].text
    losses = [member.losses() for member in members]
    assert [sorted(ranks) for ranks in losses] == [list(range(1, TOTAL_STEPS + 1))] * 2
    assert losses[0] != losses[1]  # the ranks' own data and RNG streams: a mix-up would show
    return losses


def _resume_and_compare(
    volume: Path, first: list[Member], reference: list[dict[int, float]]
) -> None:
    """Both members stopped at the same step, saved it as the one complete checkpoint; the
    restart continues from it into the reference losses, on every rank."""
    stop = _stopped_at(first[0])
    assert _stopped_at(first[1]) == stop
    assert 3 <= stop < TOTAL_STEPS
    checkpoints = volume / "checkpoints"
    assert [path.name for path in checkpoints.iterdir()] == [step_dir_name(stop)]
    assert read_marker(checkpoints / step_dir_name(stop)) is not None
    assert {p.name for p in (checkpoints / step_dir_name(stop) / "dcp").glob("*.distcp")} == {
        "__0_0.distcp",
        "__1_0.distcp",
    }
    second = start_job(volume, 1)
    assert finish_job(second) == [0, 0], second[0].text + second[1].text
    for before, after, expected in zip(first, second, reference, strict=True):
        assert f"resumed from step {stop} (restart 1)" in after.lines
        assert {**before.losses(), **after.losses()} == expected
        assert max(before.losses()) == stop and min(after.losses()) == stop + 1


def test_sigterm_to_every_member_saves_one_step_and_resumes_bit_identically(
    tmp_path: Path, reference: list[dict[int, float]]
) -> None:
    first = start_job(tmp_path, 0, "--sleep-s", "0.3")
    first[0].wait_for("step 3")
    for member in first:
        member.terminate()
    assert all(code != 0 for code in finish_job(first))  # an interruption is no success
    _resume_and_compare(tmp_path, first, reference)


def test_a_notice_on_one_member_stops_both_at_the_same_step(
    tmp_path: Path, reference: list[dict[int, float]]
) -> None:
    first = start_job(tmp_path, 0, "--sleep-s", "0.3")
    first[0].wait_for("step 3")
    first[0].terminate()
    first[1].wait_for("interrupted at step")  # stopped by the agreement: it has had no notice
    first[1].terminate()  # its own notice comes later, while it saves or after: harmless
    assert all(code != 0 for code in finish_job(first))
    _resume_and_compare(tmp_path, first, reference)


def test_resume_skips_checkpoints_that_not_every_rank_completed(
    tmp_path: Path, reference: list[dict[int, float]]
) -> None:
    first = start_job(tmp_path, 0, "--every-steps", "2", total_steps=7)
    assert finish_job(first) == [0, 0], first[0].text + first[1].text
    checkpoints = tmp_path / "checkpoints"
    assert sorted(path.name for path in checkpoints.iterdir()) == [
        step_dir_name(step) for step in (2, 4, 6)
    ]
    (checkpoints / step_dir_name(6) / MARKER_NAME).unlink()  # rank 0 died before the marker
    (checkpoints / step_dir_name(4) / "dcp" / "__1_0.distcp").unlink()  # rank 1's shard lost
    leftover = checkpoints / f".tmp-{step_dir_name(7)}-dead0000"  # a save cut off mid-write
    shutil.copytree(checkpoints / step_dir_name(2), leftover)

    second = start_job(tmp_path, 1)
    assert finish_job(second) == [0, 0], second[0].text + second[1].text
    assert not leftover.exists()
    for after, expected in zip(second, reference, strict=True):
        assert "resumed from step 2 (restart 1)" in after.lines
        assert after.losses() == {step: loss for step, loss in expected.items() if step > 2}
