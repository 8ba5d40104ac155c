"""When the broker deletes old commit-log segments and when it refuses writes: pure policy."""

from dataclasses import dataclass


@dataclass(frozen=True)
class RetentionAction:
    delete_expired: bool  # delete segments older than fileReservedTime
    force: bool  # delete the oldest segments even if they have not expired
    writable: bool  # accept new messages


def parse_delete_when(text: str) -> frozenset[int]:
    """`deleteWhen` is an hour of the day, or several joined by ';' (RocketMQ's form: "04")."""
    hours = frozenset(int(part) for part in text.split(";") if part.strip())
    if not hours or any(not 0 <= hour <= 23 for hour in hours):
        raise ValueError(f"deleteWhen must list hours 0..23 separated by ';', got {text!r}")
    return hours


def retention_action(hour: int, delete_hours: frozenset[int], disk_ratio: float,
                     max_used_ratio: float, force_ratio: float, warning_ratio: float) -> RetentionAction:
    """RocketMQ's rule: expired files go at the configured hour or as soon as the disk is fuller
    than diskMaxUsedSpaceRatio; past diskSpaceCleanForciblyRatio even unexpired files go, oldest
    first; past diskSpaceWarningLevelRatio writes are refused until space is back."""
    disk_pressure = disk_ratio > max_used_ratio
    return RetentionAction(
        delete_expired=hour in delete_hours or disk_pressure,
        force=disk_ratio > force_ratio,
        writable=disk_ratio <= warning_ratio,
    )


def disk_used_ratio(total_blocks: int, free_blocks: int, available_blocks: int) -> float:
    """The used fraction of a filesystem as RocketMQ reads it (UtilAll.getDiskPartitionSpaceUsedPercent):
    used / (used + what an unprivileged writer may still use). Blocks reserved for the superuser (or
    otherwise unavailable) count neither way: counting them as used, as 1 - available / total does,
    read 0.86 on a disk `df` shows 66% full and made retention delete unexpired segments."""
    used = total_blocks - free_blocks
    return used / (used + available_blocks) if used + available_blocks > 0 else 0.0
