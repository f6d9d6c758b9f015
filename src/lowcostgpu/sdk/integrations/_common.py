"""What the framework callbacks share: defaults from the contract, the interrupted exit code."""

from __future__ import annotations

from lowcostgpu.sdk.env import WorkloadEnv
from lowcostgpu.sdk.metadata import MetadataClient
from lowcostgpu.sdk.notice import EXIT_INTERRUPTED, StopNotice, default_notice

__all__ = ["EXIT_INTERRUPTED", "resolve_notice"]


def resolve_notice(notice: StopNotice | None) -> StopNotice:
    """The given notice, or the process-wide one (installs the SIGTERM handler on first use).

    Tests and notebooks pass their own uninstalled StopNotice so that no handler is installed.
    """
    return notice if notice is not None else default_notice()


def resolve_metadata(metadata: MetadataClient | None) -> MetadataClient:
    """The given client, or one built from LOWCOSTGPU_METADATA_URL/TOKEN (no-op when unset)."""
    if metadata is not None:
        return metadata
    return MetadataClient.from_env(WorkloadEnv.from_environ())
