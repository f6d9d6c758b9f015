"""The workload's view of the contract: the environment variables the control plane sets.

Everything is optional so that the same script runs unchanged on a laptop (no instance, no
metadata endpoint, volume = the current directory) and on interruptible capacity.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

DEFAULT_GRACE_PERIOD_S = 300

ENV_INSTANCE_ID = "LOWCOSTGPU_INSTANCE_ID"
ENV_VOLUME = "LOWCOSTGPU_VOLUME"
ENV_RESTART_COUNT = "LOWCOSTGPU_RESTART_COUNT"
ENV_GRACE_PERIOD_S = "LOWCOSTGPU_GRACE_PERIOD_S"
ENV_METADATA_URL = "LOWCOSTGPU_METADATA_URL"
ENV_TOKEN = "LOWCOSTGPU_TOKEN"
ENV_NODE_RANK = "LOWCOSTGPU_NODE_RANK"
ENV_NUM_NODES = "LOWCOSTGPU_NUM_NODES"
ENV_MASTER_ADDR = "LOWCOSTGPU_MASTER_ADDR"
ENV_MASTER_PORT = "LOWCOSTGPU_MASTER_PORT"


class WorkloadEnvError(ValueError):
    """A contract variable is set but malformed; the message names it and says what to do."""


@dataclass(frozen=True)
class WorkloadEnv:
    """The contract variables, parsed once, so that a typo fails at start and not at the notice."""

    instance_id: str | None
    volume: Path
    restart_count: int
    grace_period_s: int
    metadata_url: str | None
    token: str | None
    node_rank: int  # this member of a multi-node instance: 0 .. num_nodes - 1
    num_nodes: int  # 1 for a single-host instance
    master_addr: str | None  # rank 0's host and port, where the members rendezvous
    master_port: int | None

    @property
    def is_managed(self) -> bool:
        """True when the control plane started us (an instance id is set)."""
        return self.instance_id is not None

    @classmethod
    def from_environ(
        cls, environ: Mapping[str, str] | None = None, default_volume: str | Path = "."
    ) -> WorkloadEnv:
        """Read the contract from `environ` (default: os.environ); raise WorkloadEnvError if bad."""
        env = os.environ if environ is None else environ
        volume_text = _optional(env, ENV_VOLUME)
        node_rank, num_nodes = _members(env)
        master_addr, master_port = _master(env, num_nodes)
        return cls(
            instance_id=_optional(env, ENV_INSTANCE_ID),
            volume=Path(volume_text) if volume_text is not None else Path(default_volume),
            restart_count=_non_negative_int(env, ENV_RESTART_COUNT, default=0),
            grace_period_s=_non_negative_int(env, ENV_GRACE_PERIOD_S, DEFAULT_GRACE_PERIOD_S),
            metadata_url=_url(env, ENV_METADATA_URL),
            token=_optional(env, ENV_TOKEN),
            node_rank=node_rank,
            num_nodes=num_nodes,
            master_addr=master_addr,
            master_port=master_port,
        )


def _optional(env: Mapping[str, str], name: str) -> str | None:
    """An unset or blank variable means 'not given' (shells often export empty strings)."""
    value = env.get(name)
    if value is None or not value.strip():
        return None
    return value.strip()


def _non_negative_int(env: Mapping[str, str], name: str, default: int) -> int:
    text = _optional(env, name)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        raise WorkloadEnvError(
            f"{name}={text!r} is not a whole number; set it to an integer such as {default} "
            "or unset it"
        ) from None
    if value < 0:
        raise WorkloadEnvError(f"{name}={value} is negative; it must be 0 or more")
    return value


def _url(env: Mapping[str, str], name: str) -> str | None:
    text = _optional(env, name)
    if text is None:
        return None
    if not text.startswith(("http://", "https://")) or len(text.split("://", 1)[1]) == 0:
        raise WorkloadEnvError(
            f"{name}={text!r} is not an http(s) URL; expected something like "
            "'http://169.254.169.254/lowcostgpu/v1' or unset it for a local run"
        )
    return text.rstrip("/")


def _members(env: Mapping[str, str]) -> tuple[int, int]:
    """(node_rank, num_nodes); a rank outside the instance would wait forever at the rendezvous
    for members that never come, so it fails here instead."""
    num_nodes = _non_negative_int(env, ENV_NUM_NODES, default=1)
    if num_nodes < 1:
        raise WorkloadEnvError(f"{ENV_NUM_NODES}=0: an instance has at least one node")
    node_rank = _non_negative_int(env, ENV_NODE_RANK, default=0)
    if node_rank >= num_nodes:
        raise WorkloadEnvError(
            f"{ENV_NODE_RANK}={node_rank} is not below {ENV_NUM_NODES}={num_nodes}; "
            f"ranks run from 0 to {num_nodes - 1}"
        )
    return node_rank, num_nodes


def _master(env: Mapping[str, str], num_nodes: int) -> tuple[str | None, int | None]:
    """Rank 0's address and port; required with more than one node (no member could find the
    others), optional otherwise."""
    addr = _optional(env, ENV_MASTER_ADDR)
    if addr is not None and ("://" in addr or any(c.isspace() for c in addr)):
        raise WorkloadEnvError(
            f"{ENV_MASTER_ADDR}={addr!r} is not a host name or IP address; "
            "expected something like '10.0.0.5' or 'node-0'"
        )
    port = _non_negative_int(env, ENV_MASTER_PORT, default=0)  # 0: unset (never a valid port)
    if port > 65535 or (port == 0 and _optional(env, ENV_MASTER_PORT) is not None):
        raise WorkloadEnvError(f"{ENV_MASTER_PORT}={port} is not a TCP port (1 to 65535)")
    if num_nodes > 1 and (addr is None or port == 0):
        missing = ENV_MASTER_ADDR if addr is None else ENV_MASTER_PORT
        raise WorkloadEnvError(
            f"{missing} is unset but {ENV_NUM_NODES}={num_nodes}; a member of a multi-node "
            "instance needs rank 0's address and port"
        )
    return addr, port or None
