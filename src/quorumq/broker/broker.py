"""The broker assembled: topics, the send path, the read paths and housekeeping over one store.

All state is owned by the event-loop thread; only fdatasync runs in a worker thread (the flusher).
"""

import asyncio
import logging
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Callable, Iterable

from quorumq import limits
from quorumq.broker.consumers import ConsumerGroups, read_messages
from quorumq.clock import Clock
from quorumq.cluster import cluster_pb2 as pb
from quorumq.config import Config
from quorumq.core.put_status import PutStatus
from quorumq.core.retention import parse_delete_when, retention_action
from quorumq.errors import Error, QuorumqError
from quorumq.store import (PERM_READ, PERM_WRITE, AppendResult, GetResult, GetStatus, MessageIn, MessageStore,
                           TopicConfig, TopicConfigs)
from quorumq.store.flush import Flusher

log = logging.getLogger("quorumq.broker")



@dataclass(slots=True)
class PutResult:
    status: PutStatus | None  # None when `error` rejected the message before it was stored
    queue_id: int = -1
    queue_offset: int = -1
    error: QuorumqError | None = None


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


class Broker:
    def __init__(self, config: Config, clock: Clock) -> None:
        self.config = config
        self.clock = clock
        self.address = config["advertisedAddress"] or f"{config['brokerIP1']}:{config['listenPort']}"
        root = Path(config["storePathRootDir"])
        self.store = MessageStore(root, segment_bytes=config["mappedFileSizeCommitLog"],
                                  store_host=self.address, clock=clock)
        self.topics = TopicConfigs(root)
        self.consumers: ConsumerGroups | None = None
        self.flusher: Flusher | None = None
        self.arrivals = Arrivals()
        self.topics_changed = asyncio.Event()
        self.pending_messages = 0
        self.writable = True
        self.stats = {"msgPutTotal": 0, "msgGetTotal": 0, "sendRejectedTotal": 0}
        self._round_robin: dict[str, int] = {}

    def open(self) -> None:
        report = self.store.open()
        log.info("store recovered: %s", report)
        self.topics.load()
        self.consumers = ConsumerGroups(self.store, Path(self.config["storePathRootDir"]), self.clock)
        self.flusher = Flusher(self.store, sync_flush=self.config["flushDiskType"] == "SYNC_FLUSH",
                               interval_ms=self.config["flushIntervalCommitLog"])

    async def close(self) -> None:
        await self.flusher.stop()
        self.consumers.persist()
        self.store.close()

    # Topics.

    def topic_config(self, topic: str, create: bool) -> TopicConfig:
        config = self.topics.get(topic)
        if config is not None:
            return config
        if not (create and self.config["autoCreateTopicEnable"]):
            raise QuorumqError(Error.TOPIC_NOT_FOUND, f"topic {topic} does not exist on {self.config['brokerName']} "
                                                      "and autoCreateTopicEnable is false")
        queues = self.config["defaultTopicQueueNums"]
        return self.update_topic(TopicConfig(topic, read_queue_nums=queues, write_queue_nums=queues))

    def update_topic(self, config: TopicConfig) -> TopicConfig:
        self.topics.put(config)
        self.topics_changed.set()
        log.info("topic %s: read %d write %d perm %d", config.name, config.read_queue_nums,
                 config.write_queue_nums, config.perm)
        return config

    def delete_topic(self, topic: str) -> None:
        self.topics.delete(topic)
        self.store.delete_topic(topic)
        self.consumers.delete_topic(topic)
        self.topics_changed.set()

    def readable_queue_ids(self, topic: str) -> list[int]:
        config = self.topic_config(topic, create=False)
        if not config.perm & PERM_READ or not self.config["brokerPermission"] & PERM_READ:
            raise QuorumqError(Error.NO_PERMISSION, f"topic {topic} is not readable on this broker")
        return list(range(config.read_queue_nums))

    def check_queue(self, topic: str, queue_id: int) -> None:
        if queue_id not in self.readable_queue_ids(topic):
            raise QuorumqError(Error.BAD_REQUEST, f"topic {topic} has no readable queue {queue_id}")

    async def pull(self, topic: str, queue_id: int, offset: int, max_count: int, tags: frozenset[str] | None,
                   budget_s: float, raw: bool = False) -> GetResult:
        """Read a queue from `offset` (from its min if below it), waiting up to `budget_s` for news."""
        self.check_queue(topic, queue_id)
        deadline = self.clock.monotonic() + budget_s
        offset = max(offset, 0)
        while True:
            result = read_messages(self.store, topic, queue_id, offset, max_count, tags, raw)
            if result.status is GetStatus.OFFSET_TOO_SMALL:
                offset = result.min_offset
                continue
            left = deadline - self.clock.monotonic()
            if result.messages or result.status is GetStatus.OFFSET_OVERFLOW_BADLY or left <= 0:
                self.stats["msgGetTotal"] += len(result.messages)
                return result
            if result.next_offset > offset:  # only filtered-out messages so far: move on, keep waiting
                offset = result.next_offset
                continue
            await self.arrivals.wait(topic, left)

    # The send path.

    def _writable_queue(self, topic: str, queue_id: int) -> int:
        """The queue a send goes to: `queue_id`, or when it is negative the topic's next queue round
        robin. The topic is created when the config allows it, and must be writable here."""
        config = self.topic_config(topic, create=True)
        if not config.perm & PERM_WRITE or not self.config["brokerPermission"] & PERM_WRITE:
            raise QuorumqError(Error.NO_PERMISSION, f"topic {topic} is not writable on this broker")
        if queue_id < 0:
            turn = self._round_robin.get(topic, 0)
            self._round_robin[topic] = turn + 1
            return turn % config.write_queue_nums
        if queue_id >= config.write_queue_nums:
            raise QuorumqError(Error.BAD_REQUEST, f"topic {topic} has no writable queue {queue_id}")
        return queue_id

    async def put(self, messages: list[MessageIn | QuorumqError]) -> list[PutResult]:
        """Append what passed the checks with one write; wait for the flush the config asks for."""
        results = [PutResult(None, error=item) if isinstance(item, QuorumqError) else None for item in messages]
        accepted: list[tuple[int, MessageIn]] = []
        for index, message in enumerate(messages):
            if results[index] is not None:
                continue
            try:
                message.queue_id = self._writable_queue(message.topic, message.queue_id)
                accepted.append((index, message))
            except QuorumqError as error:
                results[index] = PutResult(None, error=error)
        if accepted:
            batch = [message for _, message in accepted]
            try:
                status, appended = await self._append(len(batch), {message.topic for message in batch},
                                                      lambda: self.store.append(batch))
            except QuorumqError as error:  # refused whole: disk full, overload, a store that stopped
                for index, _ in accepted:
                    results[index] = PutResult(None, error=error)
                return results
            for (index, message), (_, queue_offset) in zip(accepted, appended.offsets):
                results[index] = PutResult(status, message.queue_id, queue_offset)
        return results

    async def put_encoded(self, topic: str, queue_id: int, records: bytes, count: int) -> tuple[PutStatus, int]:
        """Append records a producer encoded for one queue (store.append_encoded), through the same
        admission and flush wait as `put`. Returns the status and the first record's queue offset;
        a refusal raises, since the records are stored all or none."""
        queue_id = self._writable_queue(topic, queue_id)
        max_body_bytes = self.config["maxMessageSize"]
        status, appended = await self._append(
            count, (topic,), lambda: self.store.append_encoded(topic, queue_id, records, count, max_body_bytes))
        return status, appended.offsets[0][1]

    def _admit(self, count: int) -> None:
        if not self.writable:
            self.stats["sendRejectedTotal"] += count
            raise QuorumqError(Error.DISK_FULL, "disk usage is above diskSpaceWarningLevelRatio; writes resume "
                                                "once space is back")
        if self.pending_messages + count > limits.PENDING_SEND_MESSAGES_MAX:
            self.stats["sendRejectedTotal"] += count
            raise QuorumqError(Error.TOO_MANY_REQUESTS, f"more than {limits.PENDING_SEND_MESSAGES_MAX} messages "
                                                        "wait to be stored; retry later")

    async def _append(self, count: int, topics: Iterable[str],
                      store_append: Callable[[], AppendResult]) -> tuple[PutStatus, AppendResult]:
        """Every send path's append: admission against the pending bound, `store_append` (one write
        of `count` messages), the flush wait the config asks for, then wake the topics' long polls."""
        self._admit(count)
        self.pending_messages += count
        try:
            appended = store_append()
            status = PutStatus.PUT_OK
            if self.config["flushDiskType"] == "SYNC_FLUSH":
                timeout_s = self.config["syncFlushTimeout"] / 1000
                if not await self.flusher.wait_flushed(appended.end_offset, timeout_s):
                    status = PutStatus.FLUSH_DISK_TIMEOUT
        finally:
            self.pending_messages -= count
        for topic in topics:
            self.arrivals.notify(topic)
        self.stats["msgPutTotal"] += count
        return status, appended

    # Housekeeping.

    def registration(self) -> pb.BrokerRegistration:
        return pb.BrokerRegistration(
            cluster=self.config["brokerClusterName"], broker_name=self.config["brokerName"],
            broker_id=self.config["brokerId"], address=self.address,
            ha_address=f"{self.config['brokerIP1']}:{self.config['haListenPort']}",
            role=self.config["brokerRole"],
            topics=[pb.TopicConfig(name=config.name, read_queue_nums=config.read_queue_nums,
                                   write_queue_nums=config.write_queue_nums, perm=config.perm)
                    for config in self.topics.all()],
            auto_create_topic=self.config["autoCreateTopicEnable"],
            default_queue_nums=self.config["defaultTopicQueueNums"], perm=self.config["brokerPermission"],
            max_offset=self.store.max_offset)

    def clean_files(self) -> None:
        ratio = self.store.disk_usage_ratio()
        action = retention_action(
            hour=datetime.fromtimestamp(self.clock.now_ms() / 1000).hour,
            delete_hours=parse_delete_when(self.config["deleteWhen"]), disk_ratio=ratio,
            max_used_ratio=self.config["diskMaxUsedSpaceRatio"] / 100,
            force_ratio=self.config["diskSpaceCleanForciblyRatio"],
            warning_ratio=self.config["diskSpaceWarningLevelRatio"])
        if action.writable != self.writable:
            log.warning("disk usage %.1f%%: writes %s", ratio * 100, "resume" if action.writable else "refused")
        self.writable = action.writable
        if action.delete_expired or action.force:
            removed = self.store.clean_expired(self.clock.now_ms(), self.config["fileReservedTime"], action.force)
            if removed:
                log.info("retention removed %d commit-log segment(s); disk usage %.1f%%", removed, ratio * 100)

    def status(self) -> dict[str, str]:
        figures = dict(self.stats)
        figures.update(commitLogMinOffset=self.store.min_offset, commitLogMaxOffset=self.store.max_offset,
                       flushedOffset=self.store.flushed_offset, pendingMessages=self.pending_messages,
                       topicCount=len(self.topics.all()), diskUsedRatio=round(self.store.disk_usage_ratio(), 4),
                       writable=self.writable, brokerRole=self.config["brokerRole"])
        return {key: str(value) for key, value in figures.items()}
