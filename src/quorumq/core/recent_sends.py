"""The message ids a master stored recently, so that a producer's retry of a send (the official
client resends with the same message id, immediately) is answered from the first copy instead of
being stored twice. Pure bookkeeping: a bounded map, oldest first out.

A master fills it as it stores, and a new master (after a failover or a restart) from the tail of
the log it holds (`window_start` says where that tail begins), so a resend of a send whose answer
the failover lost is answered from the copy the old master replicated. The log knows records, not
requests: a SendBatch is found again by its first record's message id, which is its request id,
and is whole when its last record follows (`batch`)."""

import heapq
import itertools
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

from quorumq import limits


@dataclass(frozen=True, slots=True)
class StoredCopy:
    queue_id: int
    queue_offset: int  # of its first record
    end_offset: int  # the commit-log end of the append that stored it: what replicas must hold
    count: int = 1  # the records it covers: a SendBatch this process stored, all of it


class RecentSends:
    def __init__(self, capacity: int = limits.RECENT_MESSAGE_IDS_MAX) -> None:
        assert capacity >= 1
        self._capacity = capacity
        self._copies: OrderedDict[str, StoredCopy] = OrderedDict()

    def get(self, message_id: str) -> StoredCopy | None:
        return self._copies.get(message_id) if message_id else None

    def add(self, message_id: str, copy: StoredCopy) -> None:
        if not message_id:
            return
        self._copies[message_id] = copy
        self._copies.move_to_end(message_id)
        while len(self._copies) > self._capacity:
            self._copies.popitem(last=False)

    def batch(self, request_id: str, queue_id: int, count: int, last_id: Callable[[], str]) -> StoredCopy | None:
        """The whole stored copy of a SendBatch of `count` records to `queue_id`, or None. A copy
        rebuilt from the log has an entry per record: the batch is whole when its last record
        (`last_id()`, read from the resent records only then) directly follows its first in the
        queue. A prefix alone (a slave elected before it had copied the whole batch) is None:
        the resend is stored again."""
        first = self.get(request_id)
        if first is None or first.queue_id != queue_id:
            return None
        if first.count == count:
            return first
        last = self.get(last_id()) if count > 1 else None
        if last is None or last.queue_id != queue_id or last.queue_offset != first.queue_offset + count - 1:
            return None
        return StoredCopy(queue_id, first.queue_offset, last.end_offset, count)

    def __len__(self) -> int:
        return len(self._copies)


def window_start(queue_tails: Iterable[Iterator[int]], count: int) -> int | None:
    """Where the log's last `count` indexed records begin: the commit-log offset of the
    `count`-th newest, from each queue's entries' commit-log offsets newest first (a queue's
    entries are in log order). None when the queues index fewer records."""
    newest_first = heapq.merge(*queue_tails, reverse=True)
    return next(itertools.islice(newest_first, count - 1, None), None)
