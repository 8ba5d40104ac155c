"""Reading a queue: pulls that long-poll for news, and the wake-up when a topic receives messages."""

import asyncio
from dataclasses import dataclass, field

from quorumq.broker.consumers import read_messages
from quorumq.broker.metrics import read_size
from quorumq.store import GetResult, GetStatus


@dataclass
class _Polls:
    """The long polls waiting on one topic."""
    event: asyncio.Event = field(default_factory=asyncio.Event)
    count: int = 0


class Arrivals:
    """Wakes long polls when a topic receives messages. A topic has an entry only while a poll
    waits on it: a receive on each of 100,000 never-created names kept about 1 KB per name for ever."""

    def __init__(self) -> None:
        self._polls: dict[str, _Polls] = {}

    def __len__(self) -> int:
        return len(self._polls)

    def notify(self, topic: str) -> None:
        polls = self._polls.pop(topic, None)
        if polls is not None:
            polls.event.set()

    async def wait(self, topic: str, timeout_s: float) -> None:
        polls = self._polls.get(topic)
        if polls is None:
            polls = self._polls[topic] = _Polls()
        polls.count += 1
        try:
            await asyncio.wait_for(polls.event.wait(), timeout_s)
        except TimeoutError:
            pass
        finally:
            polls.count -= 1
            if not polls.count and self._polls.get(topic) is polls:
                del self._polls[topic]


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
