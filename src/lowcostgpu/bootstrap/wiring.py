"""Wiring: the one place that knows every adapter and builds the control plane from them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from lowcostgpu.adapters.local.placeholder_nodes import PlaceholderNodes
from lowcostgpu.app.effects import EffectRunner
from lowcostgpu.app.plane import ControlPlane, PlaneConfig
from lowcostgpu.app.tokens import Tokens
from lowcostgpu.domain.capacity import Host
from lowcostgpu.domain.catalog import Catalog
from lowcostgpu.ports.clock import Clock, IdSource
from lowcostgpu.ports.nodes import NodeProvider
from lowcostgpu.ports.runtime import Runtime, Volumes
from lowcostgpu.ports.store import Store


@dataclass
class Wired:
    plane: ControlPlane
    runner: EffectRunner
    tokens: Tokens


def wire(
    *,
    store: Store,
    runtime: Runtime,
    volumes: Volumes,
    clock: Clock,
    ids: IdSource,
    hosts: Sequence[Host],
    catalog: Catalog,
    metadata_url: str,
    secret: bytes | None = None,
    tokens: Tokens | None = None,
    config: PlaneConfig | None = None,
    nodes: NodeProvider | None = None,
) -> Wired:
    """`tokens` (a served plane's rotating keyring) or one key, `secret` (tests, the demo)."""
    if tokens is None:
        if secret is None:
            raise ValueError("wire() needs the instance tokens' keyring or a secret")
        tokens = Tokens(secret)
    runner = EffectRunner(
        store=store,
        runtime=runtime,
        volumes=volumes,
        tokens=tokens,
        metadata_url=metadata_url,
        nodes=nodes or PlaceholderNodes(),  # Kubernetes passes its own (`bootstrap.serve`)
        clock=clock,  # a drain's grace counts from its SIGTERM really sent
    )
    plane = ControlPlane(
        store=store,
        runtime=runtime,
        clock=clock,
        ids=ids,
        hosts=hosts,
        catalog=catalog,
        config=config or PlaneConfig(),
        carry_out=runner.run,
    )
    plane.volumes = volumes
    return Wired(plane, runner, tokens)
