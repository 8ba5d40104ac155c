"""FIFO delivery of one consumer group on one queue: queue-level blocking, pure state, time passed in.

The rule is RocketMQ's pop-orderly rule (ConsumerOrderInfoManager): a FIFO (group, topic, queue)
has at most one outstanding batch, the offsets [committed, end) that one receive handed out; those
that passed the receive's tag filter are leased, the others are done. While any lease of the batch
is unexpired nothing is handed out. Once every lease left has expired (or was brought back with a
change of invisible time), they are handed out again together, in offset order, each with its
attempt count raised; a lease that already had `max_attempts` deliveries is instead held for the
dead-letter writer, and the rest wait behind it until it is gone. When every lease is gone (acked,
dead-lettered, or its message no longer stored), committed = end and the next receive reads the
next batch from there. A producer sends every message of a message group to one queue, so queue
order is message-group order.

Every change is a new `FifoQueue` (nothing is mutated), so a caller can append the state record of
a change before it adopts the change. A record is the complete state of one queue after a change
(`encode_record`): applying it replaces that queue's state, leases expiring at the applier's now
plus the time they had left when the record was made.
"""

import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace
from enum import Enum

from quorumq.core.leases import spent

QueueKey = tuple[str, str, int]  # group, topic, queue id
LEASE_TOPIC = "rmq_sys_FIFO_LEASE"  # the system topic of the state records (broker/lease_log.py)
TOKEN_MAX = (1 << 63) - 1


@dataclass(frozen=True, slots=True)
class FifoLease:
    offset: int
    token: int  # changes on every hand-out and every change of invisible time: stale handles miss
    attempt: int  # deliveries so far, 1-based
    until_ms: int  # invisible until then (the holder's monotonic clock)


@dataclass(frozen=True, slots=True)
class FifoQueue:
    committed: int  # the batch's first offset: the group's position on the queue
    end: int  # the first offset after the batch
    leases: tuple[FifoLease, ...] = ()  # by offset, within [committed, end)

    def __post_init__(self) -> None:
        assert 0 <= self.committed <= self.end, (self.committed, self.end)
        offsets = [lease.offset for lease in self.leases]
        assert offsets == sorted(set(offsets)), offsets
        assert not offsets or self.committed <= offsets[0] and offsets[-1] < self.end, (self, offsets)
        assert bool(offsets) == (self.committed < self.end), self  # a batch without leases is done

    def lease(self, offset: int) -> FifoLease | None:
        return next((lease for lease in self.leases if lease.offset == offset), None)

    def blocked(self, now_ms: int) -> bool:
        """A lease of the batch is unexpired: nothing of this queue may be handed out."""
        return any(lease.until_ms > now_ms for lease in self.leases)


class Step(Enum):
    """What a receive does with one FIFO queue (`next_step`)."""

    BLOCKED = "blocked"  # a lease is unexpired: nothing
    DEAD_LETTER = "dead-letter"  # hold these spent leases for the dead-letter writer, hand out nothing
    REDELIVER = "redeliver"  # hand these leases out again, a prefix at most, in order
    NEXT_BATCH = "next-batch"  # the batch is done: read a new one from `end`


def next_step(queue: FifoQueue, now_ms: int, max_attempts: int) -> tuple[Step, tuple[FifoLease, ...]]:
    if not queue.leases:
        return Step.NEXT_BATCH, ()
    if queue.blocked(now_ms):
        return Step.BLOCKED, ()
    dead = tuple(lease for lease in queue.leases if spent(lease.attempt, max_attempts))
    if dead:
        return Step.DEAD_LETTER, dead
    return Step.REDELIVER, queue.leases


def _settled(committed: int, end: int, leases: tuple[FifoLease, ...]) -> FifoQueue:
    """A batch whose leases are all gone is done: its end is the new position."""
    return FifoQueue(committed if leases else end, end, leases)


def redeliver(queue: FifoQueue, tokens: Mapping[int, int], gone: Collection[int], now_ms: int,
              invisible_ms: int) -> FifoQueue:
    """Hand the leases at `tokens` (offset -> new token) out again, one more attempt each, and drop
    those at `gone` (no longer stored). Every lease must have expired, and the ones handed out must
    be a prefix of those left, so nothing goes out ahead of an earlier message."""
    assert not queue.blocked(now_ms), queue
    kept = [lease for lease in queue.leases if lease.offset not in gone]
    assert len(kept) + len(gone) == len(queue.leases), (queue, gone)
    assert [lease.offset for lease in kept[:len(tokens)]] == list(tokens), (kept, tokens)
    leases = tuple(replace(lease, token=tokens[lease.offset], attempt=lease.attempt + 1,
                           until_ms=now_ms + invisible_ms) if lease.offset in tokens else lease for lease in kept)
    return _settled(queue.committed, queue.end, leases)


def hold_dead_letters(queue: FifoQueue, tokens: Mapping[int, int], now_ms: int, hold_ms: int) -> FifoQueue:
    """Lease the spent messages at `tokens` to the dead-letter writer for `hold_ms` (no delivery:
    the attempt count stays): the queue stays blocked while they are written, and a write that
    fails leaves them to expire and be tried again."""
    assert not queue.blocked(now_ms) and tokens, queue
    leases = tuple(replace(lease, token=tokens[lease.offset], until_ms=now_ms + hold_ms)
                   if lease.offset in tokens else lease for lease in queue.leases)
    assert sum(lease.offset in tokens for lease in queue.leases) == len(tokens), (queue, tokens)
    return FifoQueue(queue.committed, queue.end, leases)


def next_batch(queue: FifoQueue, tokens: Mapping[int, int], end: int, now_ms: int, invisible_ms: int) -> FifoQueue:
    """A new batch [queue.end, end): the messages at `tokens` (offset -> token) passed the filter
    and are handed out (attempt 1), the rest of the range is done."""
    assert not queue.leases and queue.end <= end, (queue, end)
    assert all(queue.end <= offset < end for offset in tokens), (queue, tokens, end)
    leases = tuple(FifoLease(offset, token, 1, now_ms + invisible_ms) for offset, token in sorted(tokens.items()))
    return _settled(queue.end, end, leases)


def skip_to(queue: FifoQueue, offset: int) -> FifoQueue:
    """An idle queue moves to `offset` when what lies below it is no longer stored."""
    assert not queue.leases, queue
    return FifoQueue(max(queue.end, offset), max(queue.end, offset))


def ack(queue: FifoQueue, offset: int, token: int) -> FifoQueue | None:
    """Drop the lease at `offset` held by `token` (acked, or written as a dead letter); None when
    the handle is stale (no such lease, or it was handed out again since)."""
    lease = queue.lease(offset)
    if lease is None or lease.token != token:
        return None
    return forget(queue, offset)


def forget(queue: FifoQueue, offset: int) -> FifoQueue:
    """Drop the lease at `offset` whatever its token (its message is no longer stored)."""
    return _settled(queue.committed, queue.end, tuple(lease for lease in queue.leases if lease.offset != offset))


def change_invisible(queue: FifoQueue, offset: int, token: int, new_token: int, now_ms: int,
                     invisible_ms: int) -> FifoQueue | None:
    """The lease at `offset` held by `token` becomes visible again after `invisible_ms` (0: a nack),
    under `new_token`; None when the handle is stale."""
    lease = queue.lease(offset)
    if lease is None or lease.token != token:
        return None
    changed = replace(lease, token=new_token, until_ms=now_ms + invisible_ms)
    return FifoQueue(queue.committed, queue.end,
                     tuple(changed if held.offset == offset else held for held in queue.leases))


# State records: the body of a record in the lease topic, and an entry of fifoLeases.json.

def record_fields(key: QueueKey, queue: FifoQueue, now_ms: int) -> dict:
    group, topic, queue_id = key
    return {"g": group, "t": topic, "q": queue_id, "c": queue.committed, "e": queue.end,
            "l": [[lease.offset, lease.token, lease.attempt, max(lease.until_ms - now_ms, 0)]
                  for lease in queue.leases]}


def encode_record(key: QueueKey, queue: FifoQueue, now_ms: int) -> bytes:
    """The state of one queue as compact JSON; each lease carries the invisible time it has left."""
    return json.dumps(record_fields(key, queue, now_ms), separators=(",", ":")).encode()


def from_fields(fields: object, now_ms: int) -> tuple[QueueKey, FifoQueue]:
    """A record's fields as the state they describe at `now_ms`; ValueError when they break any rule."""
    if not isinstance(fields, dict) or set(fields) != {"g", "t", "q", "c", "e", "l"}:
        raise ValueError(f"a FIFO state record has fields g t q c e l, not {fields!r:.200}")
    group, topic, queue_id, committed, end, leases = (fields[name] for name in "gtqcel")
    if not (isinstance(group, str) and group and isinstance(topic, str) and topic):
        raise ValueError("a FIFO state record names its group and topic")
    if not _counts(queue_id, committed, end) or committed > end or not isinstance(leases, list):
        raise ValueError(f"a FIFO state record needs queue and offsets 0 <= c <= e, not {fields!r:.200}")
    held = []
    for lease in leases:
        if not (isinstance(lease, list) and len(lease) == 4 and _counts(*lease) and lease[1] <= TOKEN_MAX
                and lease[2] >= 1):
            raise ValueError(f"a FIFO lease is [offset, token, attempt >= 1, remaining ms], not {lease!r:.200}")
        offset, token, attempt, remaining_ms = lease
        held.append(FifoLease(offset, token, attempt, now_ms + remaining_ms))
    offsets = [lease.offset for lease in held]
    if offsets != sorted(set(offsets)) or offsets and not committed <= offsets[0] <= offsets[-1] < end \
            or bool(offsets) != (committed < end):
        raise ValueError(f"FIFO leases must lie in [c, e) in order, and be there while c < e: {fields!r:.200}")
    return (group, topic, queue_id), FifoQueue(committed, end, tuple(held))


def decode_record(body: bytes, now_ms: int) -> tuple[QueueKey, FifoQueue]:
    try:
        fields = json.loads(body)
    except ValueError as exc:  # UnicodeDecodeError and JSONDecodeError both are
        raise ValueError(f"a FIFO state record is not JSON: {exc}") from None
    return from_fields(fields, now_ms)


def _counts(*values: object) -> bool:
    return all(type(value) is int and value >= 0 for value in values)
