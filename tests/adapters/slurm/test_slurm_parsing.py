"""What the Slurm runtime reads of Slurm's output and exit codes, table-driven (no cluster
needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lowcostgpu.adapters.slurm.cli import Slurm, _key_values, gpus_of_gres
from lowcostgpu.domain.errors import InvalidRequest, NotFound


@pytest.mark.parametrize(
    ("gres", "gpus"),
    [
        ("gpu:4", 4),
        ("gpu:a100:8(S:0-1)", 8),
        ("gpu:a100:2,gpu:h100:2", 4),
        ("(null)", 0),
        ("", 0),
        ("mps:100,gpu:1", 1),
        ("gpu", 0),
    ],
)
def test_the_gpu_count_of_a_gres_string(gres: str, gpus: int) -> None:
    assert gpus_of_gres(gres) == gpus


def test_scontrol_key_values_keep_values_with_equals_signs() -> None:
    fields = _key_values("JobId=7 JobName=lcg-x Comment=a=b ExitCode=0:9 Reason=None")
    assert fields == {
        "JobId": "7",
        "JobName": "lcg-x",
        "Comment": "a=b",
        "ExitCode": "0:9",
        "Reason": "None",
    }


@pytest.mark.parametrize(
    ("code", "error"),
    [(229, NotFound), (225, NotFound), (1, InvalidRequest), (228, InvalidRequest)],
)
def test_a_silent_scancel_exit_code_of_a_job_already_done_means_it_is_gone(
    code: int, error: type[Exception], tmp_path: Path
) -> None:
    """scancel exits with ESLURM_ALREADY_DONE (2021 mod 256 = 229) and prints nothing when the
    signal races the job's end (seen in CI); that is 'gone', not a refusal."""
    fake = tmp_path / "scancel"
    fake.write_text(f"#!/bin/sh\nexit {code}\n")
    fake.chmod(0o755)
    with pytest.raises(error):
        Slurm(None).run([str(fake), "--signal=TERM", "31"], what="sending TERM to Slurm job 31")
