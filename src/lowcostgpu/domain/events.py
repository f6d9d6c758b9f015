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
    # Advice before any notice: the instance is among the next an on-demand request would
    # reclaim (`core.risk`); save a checkpoint now.
    PREEMPTION_RISK = "PreemptionRisk"
    CORDONED = "Cordoned"
    KILLED = "Killed"
    INTERRUPTED = "Interrupted"
    REQUEUED = "Requeued"
    HOSTS_RELEASED = "HostsReleased"  # a requeued gang's hold of its surviving hosts ended
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
        Reason.PREEMPTION_RISK,
        Reason.KILLED,
        Reason.FAILED,
        Reason.TARGET_UNMET,
        Reason.BALANCE_LOW,
        Reason.WEBHOOK_DISABLED,
    }
)


def event_type_of(reason: Reason) -> EventType:
    return EventType.WARNING if reason in WARNING_REASONS else EventType.NORMAL


# --- Words of event messages: one time format --------------------------------------------------


def iso_utc(at: int) -> str:
    """An absolute time in a message: ISO 8601 in UTC, to the second (`2026-12-01T18:50:00Z`),
    so that every message reads the same whatever the reader's zone. Integer arithmetic (the
    core imports no `datetime`): days since 1970 to a civil date, after H. Hinnant's
    `civil_from_days`."""
    days, rest = divmod(int(at), 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    z = days + 719468
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    year = yoe + era * 400 + (1 if month <= 2 else 0)
    return f"{year:04d}-{month:02d}-{day:02d}T{hours:02d}:{minutes:02d}:{secs:02d}Z"


def elapsed_words(seconds: int) -> str:
    """A duration in a message: `45 s` under a minute, `12:05` (m:ss) under an hour, `1:02:03`
    (h:mm:ss) from an hour on — the format the CLI's timeline prints elapsed time in."""
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds} s"
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"
