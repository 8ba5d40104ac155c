"""SimpleConsumer progress of one consumer group on one queue: pure state, time passed in.

A received message is leased: invisible to the group until its invisible time passes, then
delivered again with its attempt count raised. The group's position on the queue (what a
restart resumes from, and what is persisted) is its lowest unacked offset. Times are a monotonic
clock's milliseconds: leases live in one process's memory, so wall-clock jumps must not move them.

A message that already had its group's `max_attempts` deliveries is not delivered again when its
lease expires: it is a dead letter (`spent`), held for the dead-letter writer (`hold`) until the
copy in the group's DLQ topic is stored, then dropped like an ack.
"""

from dataclasses import dataclass


def spent(attempt: int, max_attempts: int) -> bool:
    """Whether a message delivered `attempt` times has had every delivery its group allows
    (RocketMQ's PopMessageResultFilter: reconsumeTimes >= maxAttempts goes to the DLQ)."""
    return attempt >= max_attempts


@dataclass(slots=True)
class Lease:
    token: int  # changes on every delivery and every change of invisible time: stale handles miss
    invisible_until_ms: int
    attempt: int  # 1-based delivery attempt


class QueueLeases:
    def __init__(self, start_offset: int) -> None:
        self.next_offset = start_offset  # the first offset never delivered
        self.leases: dict[int, Lease] = {}

    @property
    def committed(self) -> int:
        """Everything below this offset is acked (or was filtered out)."""
        return min(self.leases, default=self.next_offset)

    def expired(self, now_ms: int, limit: int) -> list[int]:
        """Offsets whose invisible time has passed, oldest first, at most `limit`."""
        due = [offset for offset, lease in self.leases.items() if lease.invisible_until_ms <= now_ms]
        return sorted(due)[:limit]

    def deliver(self, offset: int, token: int, now_ms: int, invisible_ms: int) -> Lease:
        """Lease an offset for the first time; offsets skipped on the way count as done."""
        assert offset >= self.next_offset, (offset, self.next_offset)
        lease = Lease(token, now_ms + invisible_ms, attempt=1)
        self.leases[offset] = lease
        self.next_offset = offset + 1
        return lease

    def redeliver(self, offset: int, token: int, now_ms: int, invisible_ms: int) -> Lease:
        lease = self.leases[offset]
        assert lease.invisible_until_ms <= now_ms, "a visible lease cannot be delivered again"
        lease.token = token
        lease.invisible_until_ms = now_ms + invisible_ms
        lease.attempt += 1
        return lease

    def hold(self, offset: int, token: int, now_ms: int, hold_ms: int) -> Lease:
        """Lease an expired dead letter to the dead-letter writer for `hold_ms`, without counting a
        delivery: no other receive takes it while its copy is written, and a write that fails
        leaves it to expire and be tried again."""
        lease = self.leases[offset]
        assert lease.invisible_until_ms <= now_ms, "a visible lease cannot be held"
        lease.token = token
        lease.invisible_until_ms = now_ms + hold_ms
        return lease

    def skip_to(self, offset: int) -> None:
        """Nothing below `offset` is to be delivered (filtered out, or gone from the store)."""
        self.next_offset = max(self.next_offset, offset)

    def forget(self, offset: int) -> None:
        """Drop a lease whose message the store no longer holds."""
        self.leases.pop(offset, None)

    def ack(self, offset: int, token: int) -> bool:
        lease = self.leases.get(offset)
        if lease is None or lease.token != token:
            return False
        del self.leases[offset]
        return True

    def change_invisible(self, offset: int, token: int, new_token: int, now_ms: int,
                         invisible_ms: int) -> Lease | None:
        lease = self.leases.get(offset)
        if lease is None or lease.token != token:
            return None
        lease.token = new_token
        lease.invisible_until_ms = now_ms + invisible_ms
        return lease
