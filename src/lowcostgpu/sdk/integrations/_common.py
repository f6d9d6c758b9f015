"""What the framework callbacks share: defaults from the contract, the interrupted exit code."""

from __future__ import annotations

from lowcostgpu.sdk.env import WorkloadEnv
from lowcostgpu.sdk.metadata import MetadataClient
from lowcostgpu.sdk.notice import StopNotice, default_notice

# 128 + SIGTERM: what a shell reports for a process ended by SIGTERM. Exiting with it after a
# notice keeps "stopped because we were asked to" distinguishable from success (0) everywhere,
# also for tools that only look at the exit status.
EXIT_INTERRUPTED = 143


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
