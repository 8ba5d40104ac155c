"""Reading a queue: pulls that long-poll for news, and the wake-up when a topic receives messages."""

import asyncio

from quorumq.broker.consumers import read_messages
from quorumq.broker.metrics import read_size
from quorumq.store import GetResult, GetStatus


class Arrivals:
    """Wakes long polls when a topic receives messages."""

    def __init__(self) -> None:
        self._events: dict[str, asyncio.Event] = {}

    def notify(self, topic: str) -> None:
        event = self._events.pop(topic, None)
        if event is not None:
            event.set()

    async def wait(self, topic: str, timeout_s: float) -> None:
        event = self._events.setdefault(topic, asyncio.Event())
        try:
            await asyncio.wait_for(event.wait(), timeout_s)
        except TimeoutError:
            pass


class Pulls:
    def __init__(self, broker) -> None:  # the Broker (broker/broker.py) this is a part of
        self._broker = broker

    async def pull(self, topic: str, queue_id: int, offset: int, max_count: int, tags: frozenset[str] | None,
                   budget_s: float, raw: bool = False, group: str = "") -> GetResult:
        """Read a queue from `offset` (from its min if below it), waiting up to `budget_s` for news;
        `group` names the reader in the metrics."""
        broker = self._broker
        broker.topics.check_queue(topic, queue_id)
        deadline = broker.clock.monotonic() + budget_s
        offset = max(offset, 0)
        while True:
            result = read_messages(broker.store, topic, queue_id, offset, max_count, tags, broker.readable_end(),
                                   raw)
            if result.status is GetStatus.OFFSET_TOO_SMALL:
                offset = result.min_offset
                continue
            left = deadline - broker.clock.monotonic()
            if result.messages or result.status is GetStatus.OFFSET_OVERFLOW_BADLY or left <= 0:
                self.count_read(topic, group, result.messages)
                return result
            if result.next_offset > offset:  # only filtered-out messages so far: move on, keep waiting
                offset = result.next_offset
                continue
            await broker.arrivals.wait(topic, left)

    def count_read(self, topic: str, group: str, messages: list) -> None:
        broker = self._broker
        broker.stats["msgGetTotal"] += len(messages)
        if broker.metrics is not None and messages:
            broker.metrics.read(topic, group, len(messages), read_size(messages))
