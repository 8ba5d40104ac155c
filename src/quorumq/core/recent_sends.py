"""The message ids a master stored recently, so that a producer's retry of a send (the official
client resends with the same message id, immediately) is answered from the first copy instead of
being stored twice. Pure bookkeeping: a bounded map, oldest first out."""

from collections import OrderedDict
from dataclasses import dataclass

from quorumq import limits


@dataclass(frozen=True, slots=True)
class StoredCopy:
    queue_id: int
    queue_offset: int
    end_offset: int  # the commit-log end of the append that stored it: what replicas must hold


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

    def __len__(self) -> int:
        return len(self._copies)
