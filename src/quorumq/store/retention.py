"""Retention and deletion: which commit-log segments go (a pure decision, so it can be tested
alone), deleting them with the consume-queue files that only point below the new minimum.
"""

import logging
import os
from collections.abc import Sequence

from quorumq import limits
from quorumq.core import codec
from quorumq.core.codec import HEADER
from quorumq.core.retention import disk_used_ratio
from quorumq.store.state import StoreState

log = logging.getLogger(__name__)

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


class Retention:
    def __init__(self, state: StoreState) -> None:
        self._state = state

    def clean_expired(self, now_ms: int, reserved_hours: float, force: bool) -> int:
        """Delete the oldest expired commit-log segments (or the oldest one when `force`), then
        the consume-queue files that only point below the new minimum. Returns segments deleted."""
        state = self._state
        state.check_open()
        segments = state.commit_log.segments
        candidates = min(len(segments) - 1, limits.RETENTION_SEGMENTS_PER_RUN_MAX)
        ends = [self._segment_end_timestamp(index) for index in range(max(candidates, 0))]
        count = segments_to_delete(ends, now_ms, reserved_hours, force)
        if count:
            log.info("retention: deleting %d commit-log segment(s) from offset %d", count, segments[0].start)
            state.commit_log.delete_oldest(count)
            for queue in state.all_queues():
                queue.advance_min(state.commit_log.min_offset)
        return count

    def _segment_end_timestamp(self, index: int) -> int:
        """The last store time of a sealed segment: that of the first record of the next one,
        or the file's modification time when that record cannot be read."""
        segment = self._state.commit_log.segments[index]
        if segment.end_timestamp_ms is None:
            following = self._state.commit_log.segments[index + 1]
            timestamp = codec.store_timestamp_of(self._state.commit_log.read(following.start, HEADER.size))
            if timestamp is None:
                timestamp = os.stat(segment.path).st_mtime_ns // 1_000_000
            segment.end_timestamp_ms = timestamp
        return segment.end_timestamp_ms

    def disk_usage_ratio(self) -> float:
        """The used fraction of the filesystem that holds the store, as an unprivileged user sees it."""
        stats = os.statvfs(self._state.root)
        return disk_used_ratio(stats.f_blocks, stats.f_bfree, stats.f_bavail)
