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
        node_rank=0,
        num_nodes=1,
        master_addr=None,
        master_port=None,
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
        ("LOWCOSTGPU_NODE_RANK", "first", "not a whole number"),
        ("LOWCOSTGPU_NODE_RANK", "-1", "negative"),
        ("LOWCOSTGPU_NUM_NODES", "0", "at least one node"),
        ("LOWCOSTGPU_NUM_NODES", "two", "not a whole number"),
        ("LOWCOSTGPU_MASTER_PORT", "0", "not a TCP port"),
        ("LOWCOSTGPU_MASTER_PORT", "65536", "not a TCP port"),
        ("LOWCOSTGPU_MASTER_PORT", "http", "not a whole number"),
        ("LOWCOSTGPU_MASTER_ADDR", "tcp://10.0.0.5", "not a host name"),
        ("LOWCOSTGPU_MASTER_ADDR", "node 0", "not a host name"),
    ],
)
def test_malformed_values_are_refused_with_the_variable_named(
    name: str, value: str, message: str
) -> None:
    with pytest.raises(WorkloadEnvError) as error:
        WorkloadEnv.from_environ({name: value})
    assert name in str(error.value)
    assert message in str(error.value)


RANK, ADDR, PORT = "LOWCOSTGPU_NODE_RANK", "LOWCOSTGPU_MASTER_ADDR", "LOWCOSTGPU_MASTER_PORT"
MEMBER = {"LOWCOSTGPU_NUM_NODES": "4", RANK: "3", ADDR: "10.0.0.5", PORT: "29500"}


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, (0, 1, None, None)),
        (MEMBER, (3, 4, "10.0.0.5", 29500)),
        ({**MEMBER, "LOWCOSTGPU_NODE_RANK": ""}, (0, 4, "10.0.0.5", 29500)),
        ({"LOWCOSTGPU_NUM_NODES": "1", "LOWCOSTGPU_MASTER_ADDR": " h0 "}, (0, 1, "h0", None)),
        ({ADDR: "fe80::1", PORT: "1"}, (0, 1, "fe80::1", 1)),
    ],
)
def test_the_member_of_a_multi_node_instance_is_read(
    environ: dict[str, str], expected: tuple[int, int, str | None, int | None]
) -> None:
    env = WorkloadEnv.from_environ(environ)
    assert (env.node_rank, env.num_nodes, env.master_addr, env.master_port) == expected


@pytest.mark.parametrize(
    ("environ", "named", "message"),
    [
        ({**MEMBER, RANK: "4"}, "LOWCOSTGPU_NODE_RANK=4", "ranks run from 0 to 3"),
        ({"LOWCOSTGPU_NODE_RANK": "1"}, "LOWCOSTGPU_NUM_NODES=1", "not below"),
        ({**MEMBER, "LOWCOSTGPU_MASTER_ADDR": ""}, "LOWCOSTGPU_MASTER_ADDR", "is unset"),
        ({**MEMBER, "LOWCOSTGPU_MASTER_PORT": " "}, "LOWCOSTGPU_MASTER_PORT", "is unset"),
    ],
)
def test_an_inconsistent_member_is_refused_with_the_variables_named(
    environ: dict[str, str], named: str, message: str
) -> None:
    with pytest.raises(WorkloadEnvError) as error:
        WorkloadEnv.from_environ(environ)
    assert named in str(error.value)
    assert message in str(error.value)
