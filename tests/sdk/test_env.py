from __future__ import annotations

from pathlib import Path

import pytest

from lowcostgpu.sdk.env import WorkloadEnv, WorkloadEnvError


def test_a_local_run_without_any_variable_gets_defaults() -> None:
    env = WorkloadEnv.from_environ({}, default_volume="/tmp/here")
    assert env == WorkloadEnv(
        instance_id=None,
        volume=Path("/tmp/here"),
        restart_count=0,
        grace_period_s=300,
        metadata_url=None,
        token=None,
    )
    assert not env.is_managed


def test_a_managed_run_reads_every_contract_variable() -> None:
    env = WorkloadEnv.from_environ(
        {
            "LOWCOSTGPU_INSTANCE_ID": "ins-42",
            "LOWCOSTGPU_VOLUME": "/mnt/ckpts",
            "LOWCOSTGPU_RESTART_COUNT": "3",
            "LOWCOSTGPU_GRACE_PERIOD_S": "120",
            "LOWCOSTGPU_METADATA_URL": "http://127.0.0.1:9/meta/",
            "LOWCOSTGPU_TOKEN": "tok",
        }
    )
    assert env.instance_id == "ins-42"
    assert env.volume == Path("/mnt/ckpts")
    assert (env.restart_count, env.grace_period_s) == (3, 120)
    assert env.metadata_url == "http://127.0.0.1:9/meta"
    assert env.token == "tok"
    assert env.is_managed


def test_blank_variables_count_as_unset() -> None:
    env = WorkloadEnv.from_environ(
        {"LOWCOSTGPU_METADATA_URL": "  ", "LOWCOSTGPU_RESTART_COUNT": "", "LOWCOSTGPU_TOKEN": ""}
    )
    assert (env.metadata_url, env.restart_count, env.token) == (None, 0, None)


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("LOWCOSTGPU_RESTART_COUNT", "two", "not a whole number"),
        ("LOWCOSTGPU_RESTART_COUNT", "1.5", "not a whole number"),
        ("LOWCOSTGPU_RESTART_COUNT", "-1", "negative"),
        ("LOWCOSTGPU_GRACE_PERIOD_S", "5m", "not a whole number"),
        ("LOWCOSTGPU_GRACE_PERIOD_S", "-30", "negative"),
        ("LOWCOSTGPU_METADATA_URL", "169.254.169.254/meta", "not an http(s) URL"),
        ("LOWCOSTGPU_METADATA_URL", "http://", "not an http(s) URL"),
    ],
)
def test_malformed_values_are_refused_with_the_variable_named(
    name: str, value: str, message: str
) -> None:
    with pytest.raises(WorkloadEnvError) as error:
        WorkloadEnv.from_environ({name: value})
    assert name in str(error.value)
    assert message in str(error.value)
