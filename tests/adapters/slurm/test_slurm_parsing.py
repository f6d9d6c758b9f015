"""What the Slurm runtime reads of Slurm's text output, table-driven (no cluster needed)."""

from __future__ import annotations

import pytest

from lowcostgpu.adapters.slurm.cli import _key_values, gpus_of_gres


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
