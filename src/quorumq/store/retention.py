"""Which commit-log segments retention deletes: a pure decision, so it can be tested alone."""

from typing import Sequence

from quorumq import limits

HOUR_MS = 3600 * 1000


def segments_to_delete(end_timestamps_ms: Sequence[int], now_ms: int, reserved_hours: float,
                       force: bool) -> int:
    """How many of the oldest sealed segments to delete.

    `end_timestamps_ms` holds, oldest first, the last store time of every segment except the
    active one, which is never deleted. A segment expires once `reserved_hours` have passed since
    its last store time. Deletion stops at the first segment that has not expired, so the log
    stays contiguous; `force` (the disk is above its limit) deletes the oldest one regardless.
    At most RETENTION_SEGMENTS_PER_RUN_MAX go per run, so one run never stalls the caller long.
    """
    reserved_ms = reserved_hours * HOUR_MS
    expired = 0
    for end_ms in end_timestamps_ms:
        if now_ms - end_ms <= reserved_ms:
            break
        expired += 1
    if force and end_timestamps_ms:
        expired = max(expired, 1)
    return min(expired, limits.RETENTION_SEGMENTS_PER_RUN_MAX)
