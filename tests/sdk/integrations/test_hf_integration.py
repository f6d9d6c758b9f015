"""HF Trainer + LowcostgpuTrainerCallback: SIGTERM saves at the step's end, resume is exact."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

import hf_worker  # noqa: E402  (tests/sdk/integrations is on sys.path: rootdir import mode)
from procs import run_workload  # noqa: E402

from lowcostgpu.sdk.integrations import EXIT_INTERRUPTED  # noqa: E402
from lowcostgpu.sdk.integrations.hf import (  # noqa: E402
    HF_IN_PROGRESS_SENTINEL,
    MARKER_NAME,
    is_complete_checkpoint,
    latest_complete_checkpoint,
)
from lowcostgpu.sdk.notice import StopNotice  # noqa: E402
from lowcostgpu.sdk.testing import FakeMetadata  # noqa: E402

WORKER = str(Path(hf_worker.__file__))
MAX_STEPS = 24  # 20 rows / batch 4 = 5 steps an epoch: the stop lands in epoch 1, mid-epoch
SAVE_STEPS = 5


def _run_in_process(output_dir: Path, result: Path) -> dict[str, Any]:
    argv = ["--output-dir", str(output_dir), "--result", str(result)]
    argv += ["--max-steps", str(MAX_STEPS), "--save-steps", str(SAVE_STEPS)]
    assert hf_worker.main(argv, notice=StopNotice()) == 0
    loaded: dict[str, Any] = torch.load(result)
    return loaded


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """One uninterrupted run: its output dir (for the checkpoint tests) and its result."""
    root = tmp_path_factory.mktemp("hf-reference")
    return root / "out", _run_in_process(root / "out", root / "result.pt")


def test_sigterm_saves_at_step_end_and_resume_matches_uninterrupted_run(
    tmp_path: Path,
    reference: tuple[Path, dict[str, Any]],
    metadata_server: FakeMetadata,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    out = tmp_path / "out"
    env = {"LOWCOSTGPU_METADATA_URL": metadata_server.url, "LOWCOSTGPU_TOKEN": "secret-token"}
    args = [WORKER, "--output-dir", str(out), "--result", str(tmp_path / "first.pt")]
    args += ["--max-steps", str(MAX_STEPS), "--save-steps", str(SAVE_STEPS), "--sleep-s", "0.3"]

    first = run_workload(args, env=env, signal_on="step 7")

    assert first.returncode == EXIT_INTERRUPTED, first.text
    stop_step = int(re.findall(r"interrupted at step (\d+)", first.text)[-1])
    assert 7 <= stop_step < MAX_STEPS
    assert f"step {stop_step + 1}\n" not in first.lines  # stopped at the end of that step
    assert latest_complete_checkpoint(out) == str(out / f"checkpoint-{stop_step}")
    reported = [body["step"] for body in metadata_server.posted("/checkpoint")]
    assert reported == [s for s in (5, 10, 15, 20) if s < stop_step] + [stop_step]
    claims = [
        (b["save_s"] >= 0, b["saves_on_notice"]) for b in metadata_server.posted("/checkpoint")
    ]
    assert claims == [(True, True)] * len(reported)  # each save timed; it saves at a notice
    assert metadata_server.posted("/complete") == []  # an interruption is not a success

    # A crash mid-save of a later step left a half-written directory: it must be skipped,
    # and cleared away at train begin.
    _half_written(out / f"checkpoint-{stop_step}", out / f"checkpoint-{stop_step + 1}")
    monkeypatch.setenv("LOWCOSTGPU_METADATA_URL", metadata_server.url)
    monkeypatch.setenv("LOWCOSTGPU_TOKEN", "secret-token")
    resumed = _run_in_process(out, tmp_path / "resumed.pt")

    _, expected = reference
    assert resumed["step"] == MAX_STEPS
    assert resumed["losses"] == expected["losses"]  # every logged loss, bit for bit
    for name, tensor in expected["weights"].items():
        assert torch.equal(resumed["weights"][name], tensor), name
    assert metadata_server.posted("/complete") == [{"step": MAX_STEPS}]
    assert not (out / f"checkpoint-{stop_step + 1}").exists() or is_complete_checkpoint(
        out / f"checkpoint-{stop_step + 1}"
    )


def _half_written(complete: Path, target: Path) -> None:
    shutil.copytree(complete, target)
    (target / MARKER_NAME).unlink()
    (target / "optimizer.pt").unlink()
    (target / "trainer_state.json").unlink()


def _drop(name: str) -> Callable[[Path], None]:
    return lambda path: (path / name).unlink()


def _truncate(name: str) -> Callable[[Path], None]:
    def apply(path: Path) -> None:
        data = (path / name).read_bytes()
        (path / name).write_bytes(data[: len(data) // 2])

    return apply


def _edit_json(name: str, key: str, value: object) -> Callable[[Path], None]:
    def apply(path: Path) -> None:
        doc = json.loads((path / name).read_text())
        doc[key] = value
        (path / name).write_text(json.dumps(doc))

    return apply


def _touch(name: str) -> Callable[[Path], None]:
    return lambda path: (path / name).write_text("in progress")


def _garble(name: str) -> Callable[[Path], None]:
    return lambda path: (path / name).write_text("{not json")


BROKEN = {
    "no completion marker (killed before our on_save)": _drop(MARKER_NAME),
    "marker but weights truncated": _truncate("model.safetensors"),
    "marker but optimizer missing": _drop("optimizer.pt"),
    "scheduler missing": _drop("scheduler.pt"),
    "rng state missing": _drop("rng_state.pth"),
    "trainer_state.json missing (written last by the Trainer)": _drop("trainer_state.json"),
    "trainer_state.json names another step": _edit_json("trainer_state.json", "global_step", 3),
    "marker names another step": _edit_json(MARKER_NAME, "step", 3),
    "marker is not JSON": _garble(MARKER_NAME),
    "HF JIT save still in progress": _touch(HF_IN_PROGRESS_SENTINEL),
}


@pytest.mark.parametrize("damage", BROKEN.values(), ids=BROKEN.keys())
def test_incomplete_checkpoint_is_never_chosen(
    tmp_path: Path, reference: tuple[Path, dict[str, Any]], damage: Callable[[Path], None]
) -> None:
    source, _ = reference
    out = tmp_path / "out"
    shutil.copytree(source / "checkpoint-15", out / "checkpoint-15")
    shutil.copytree(source / "checkpoint-20", out / "checkpoint-20")
    damage(out / "checkpoint-20")

    assert latest_complete_checkpoint(out) == str(out / "checkpoint-15")


def test_checkpoint_written_without_callback_is_accepted_only_when_asked(
    tmp_path: Path, reference: tuple[Path, dict[str, Any]]
) -> None:
    source, _ = reference
    shutil.copytree(source / "checkpoint-20", tmp_path / "checkpoint-20")
    (tmp_path / "checkpoint-20" / MARKER_NAME).unlink()

    assert latest_complete_checkpoint(tmp_path) is None
    assert latest_complete_checkpoint(tmp_path, require_marker=False) == str(
        tmp_path / "checkpoint-20"
    )


def test_newest_complete_checkpoint_wins_and_nothing_means_fresh_start(
    tmp_path: Path, reference: tuple[Path, dict[str, Any]]
) -> None:
    source, _ = reference
    assert latest_complete_checkpoint(tmp_path / "missing") is None
    assert latest_complete_checkpoint(tmp_path) is None
    for step in (5, 10, 20):
        shutil.copytree(source / f"checkpoint-{step}", tmp_path / f"checkpoint-{step}")
    (tmp_path / "checkpoint-999-notes").mkdir()

    assert latest_complete_checkpoint(tmp_path) == str(tmp_path / "checkpoint-20")
