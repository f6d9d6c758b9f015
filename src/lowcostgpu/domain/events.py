"""Event vocabulary, after Kubernetes Event conventions: a type, a CamelCase reason, a message."""

from __future__ import annotations

from enum import StrEnum


class EventType(StrEnum):
    NORMAL = "Normal"
    WARNING = "Warning"


class Reason(StrEnum):
    QUEUED = "Queued"
    SCHEDULED = "Scheduled"
    STARTED = "Started"
    PREEMPTED = "Preempted"
    CORDONED = "Cordoned"
    KILLED = "Killed"
    INTERRUPTED = "Interrupted"
    REQUEUED = "Requeued"
    RESTARTED = "Restarted"
    CHECKPOINT_REPORTED = "CheckpointReported"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    STOPPING = "Stopping"
    STOPPED = "Stopped"
    DELETED = "Deleted"
    NODE_ADDED = "NodeAdded"
    NODE_REMOVED = "NodeRemoved"
    TARGET_CHANGED = "TargetChanged"
    TARGET_MET = "TargetMet"
    TARGET_UNMET = "TargetUnmet"
    BALANCE_LOW = "BalanceLow"
    VOLUME_CREATED = "VolumeCreated"
    VOLUME_RESIZED = "VolumeResized"
    VOLUME_DELETED = "VolumeDeleted"
    WEBHOOK_DISABLED = "WebhookDisabled"
    WEBHOOK_ENABLED = "WebhookEnabled"


WARNING_REASONS = frozenset(
    {
        Reason.PREEMPTED,
        Reason.KILLED,
        Reason.FAILED,
        Reason.TARGET_UNMET,
        Reason.BALANCE_LOW,
        Reason.WEBHOOK_DISABLED,
    }
)


def event_type_of(reason: Reason) -> EventType:
    return EventType.WARNING if reason in WARNING_REASONS else EventType.NORMAL
