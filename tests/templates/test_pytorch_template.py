"""The pytorch template survives SIGTERMs and a SIGKILL with a bit-identical loss trajectory."""

from __future__ import annotations

import itertools
import json
import random
import re
import shutil
import signal
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from lowcostgpu.sdk.drill import Run, drill, run_once, workload_env
from lowcostgpu.sdk.testing import FakeMetadata

torch = pytest.importorskip("torch")

STEPS = 80
ARGV = [
    sys.executable,
    "-m",
    "lowcostgpu.templates.pytorch",
    f"--steps={STEPS}",
    "--every-steps=15",
    "--batch-size=16",
    "--dataset-size=200",
    "--step-delay-s=0.02",
]
STEP_LINE = re.compile(r"^step (\d+) loss (\S+)$")


def losses_by_step(runs: list[Run]) -> dict[int, set[str]]:
    seen: dict[int, set[str]] = defaultdict(set)
    for run in runs:
        for line in run.lines:
            match = STEP_LINE.match(line)
            if match:
                seen[int(match.group(1))].add(match.group(2))
    return seen


def interruption_plan(seed: int, signals: list[int]) -> list[tuple[int, int]]:
    """The signals at increasing 'random' steps (fixed seed), well before the end."""
    steps = sorted(random.Random(seed).sample(range(17, STEPS - 10), len(signals)))
    return list(zip(steps, signals, strict=True))


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Run]:
    volume = tmp_path_factory.mktemp("reference")
    run = run_once(ARGV, workload_env(volume, 0))
    assert run.returncode == 0, run.lines[-10:]
    return volume, run


TERM, KILL = signal.SIGTERM, signal.SIGKILL


@pytest.mark.parametrize(
    ("extra_args", "signals"),
    [
        pytest.param([], [TERM, TERM, KILL], id="sync-save"),
        pytest.param(["--async-save=thread", "--workers=1"], [TERM], id="async-workers"),
    ],
)
def test_interrupted_training_matches_the_uninterrupted_run_bit_for_bit(
    tmp_path: Path,
    reference: tuple[Path, Run],
    metadata_server: FakeMetadata,
    extra_args: list[str],
    signals: list[int],
) -> None:
    ref_volume, ref_run = reference
    expected = losses_by_step([ref_run])
    assert sorted(expected) == list(range(1, STEPS + 1))
    assert all(len(values) == 1 for values in expected.values())

    plan = interruption_plan(seed=7, signals=signals)
    endpoint = {"LOWCOSTGPU_METADATA_URL": metadata_server.url, "LOWCOSTGPU_TOKEN": "secret-token"}
    runs = drill(ARGV + extra_args, tmp_path, plan, STEP_LINE, extra_env=endpoint)

    assert losses_by_step(runs) == expected  # every step ever logged, in every run
    for before, after in itertools.pairwise(runs):
        resumed = [line for line in after.lines if line.startswith("resumed from step ")]
        assert len(resumed) == 1  # the plan starts after the first periodic checkpoint
        if before.signal_sent == TERM:  # it finishes the step in flight, then checkpoints it
            saved = re.fullmatch(r"checkpoint step (\d+) on volume", before.lines[-1])
            assert saved is not None, before.lines[-3:]
            assert int(saved.group(1)) >= (before.signalled_at or 0)
            assert resumed[0].startswith(f"resumed from step {saved.group(1)} ")

    assert (tmp_path / "final" / "model.pt").read_bytes() == (
        ref_volume / "final" / "model.pt"
    ).read_bytes()
    assert json.loads((tmp_path / "final" / "losses.json").read_text()) == json.loads(
        (ref_volume / "final" / "losses.json").read_text()
    )
    assert metadata_server.posted("/complete") == [{"step": STEPS}]  # only the last run
    assert len(metadata_server.posted("/checkpoint")) >= len(plan)
    # Its loop polls the installed notice and saves there: every report claims it, with a time.
    claims = {
        (r["saves_on_notice"], r["save_s"] >= 0) for r in metadata_server.posted("/checkpoint")
    }
    assert claims == {(True, True)}


def test_resuming_with_another_model_shape_is_a_clear_error(
    tmp_path: Path, reference: tuple[Path, Run]
) -> None:
    volume = tmp_path / "copy"
    shutil.copytree(reference[0], volume)
    run = run_once([*ARGV, "--hidden=32"], workload_env(volume, 1))
    assert run.returncode == 2
    assert run.lines == [
        f"error: the checkpoints on {volume} were made with other settings (--hidden 64 -> 32); "
        "resume with the original settings or use a fresh volume"
    ]
