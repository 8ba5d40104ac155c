"""Consumer groups on one broker: their subscription configs, committed offsets, SimpleConsumer
leases and receipt handles.

The committed offset of a (group, topic, queue) is the single source of progress: pull consumers
set it directly, SimpleConsumer groups move it to their lowest unacked offset. Leases live in memory
only, so after a restart everything unacked is delivered again (at least once). A group's first
receive from a queue fixes where it starts there (core/group_start.py); that start is its offset
from then on, persisted with the others.
"""

import os
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from quorumq import limits
from quorumq.clock import Clock
from quorumq.config import Config
from quorumq.core import properties
from quorumq.core.group_start import starts_at_zero
from quorumq.core.leases import QueueLeases
from quorumq.core.subscription import SubscriptionGroup, group_data, group_from_data
from quorumq.errors import Error, QuorumqError
from quorumq.store import ConsumerOffsets, GetResult, GetStatus, KeyedLog, Store, StoredMessage, tag_hash

QueueKey = tuple[str, str, int]  # group, topic, queue id
GROUPS_FILE_NAME = "consumerGroups.log"  # group -> first contact (ms)
LEGACY_GROUPS_FILE_NAME = "consumerGroups.json"  # the whole-file form of earlier versions, taken into the log
SUBSCRIPTIONS_FILE_NAME = "subscriptionGroups.log"  # group -> its subscription config, as RocketMQ's JSON
PHYSICAL_MEMORY_BYTES = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")  # as RocketMQ's StoreUtil reads it


@dataclass(slots=True)
class Delivery:
    message: StoredMessage
    receipt_handle: str
    attempt: int
    invisible_ms: int


def read_messages(store: Store, topic: str, queue_id: int, offset: int, max_count: int,
                  tags: frozenset[str] | None, readable_end: int | None, raw: bool = False) -> GetResult:
    """An offset-addressed read, up to `readable_end` (Broker.readable_end); the consume queue
    filters by tag hash, this by the tag itself. Raw records are not decoded here, so their reader
    re-checks the tag (a hash may collide)."""
    hashes = None if tags is None else frozenset(tag_hash(tag) for tag in tags)
    if raw:
        return store.get_records(topic, queue_id, offset, max_count, limits.PULL_BYTES_MAX, hashes, readable_end)
    result = store.get_messages(topic, queue_id, offset, max_count, limits.PULL_BYTES_MAX, hashes, readable_end)
    if tags is not None:
        result.messages = [message for message in result.messages if message.properties.get(properties.TAGS) in tags]
    return result


def encode_handle(queue_id: int, offset: int, token: int) -> str:
    return f"{queue_id}:{offset}:{token:x}"


def decode_handle(handle: str) -> tuple[int, int, int]:
    try:
        queue_id, offset, token = handle.split(":")
        return int(queue_id), int(offset), int(token, 16)
    except ValueError:
        raise QuorumqError(Error.INVALID_RECEIPT_HANDLE, f"receipt handle {handle[:64]!r} is malformed") from None


def first_contact(value: object) -> int:
    if type(value) is not int or value < 0:
        raise ValueError(f"first contact {value!r} is not a time in ms")
    return value


class ConsumerGroups:
    def __init__(self, store: Store, root: Path, clock: Clock, config: Config,
                 readable_end: Callable[[], int | None]) -> None:
        self.store = store
        self._readable_end = readable_end  # where consumers' reads end now (Broker.readable_end)
        self.clock = clock
        self.config = config
        self.offsets = ConsumerOffsets(root)
        self.offsets.load()
        self._first_seen: KeyedLog[int] = KeyedLog(
            root / "config" / GROUPS_FILE_NAME, "consumer groups", decode=first_contact,
            legacy=root / "config" / LEGACY_GROUPS_FILE_NAME)
        self._first_seen.load()
        # The groups an operator configured (updateSubGroup); any other group has the defaults.
        self._subscriptions: KeyedLog[SubscriptionGroup] = KeyedLog(
            root / "config" / SUBSCRIPTIONS_FILE_NAME, "subscription groups", encode=group_data,
            decode=group_from_data)
        self._subscriptions.load()
        self._leases: dict[QueueKey, QueueLeases] = {}
        self._tokens = random.Random()
        # Live consumers, in memory: each group's open client sessions, and when a client of the
        # group last opened one or heartbeated (monotonic ms).
        self._sessions: dict[str, int] = {}
        self._last_heard: dict[str, int] = {}

    def group(self, name: str) -> SubscriptionGroup:
        """The group's subscription config: RocketMQ's defaults for a group never configured."""
        return self._subscriptions.get(name) or SubscriptionGroup(name)

    def configured(self, name: str) -> bool:
        return name in self._subscriptions

    def subscriptions(self) -> list[SubscriptionGroup]:
        """Every configured group, by name."""
        entries = self._subscriptions.entries
        return [entries[name] for name in sorted(entries)]

    def set_subscription(self, group: SubscriptionGroup) -> None:
        """Replace a group's config (a new group is known from now on, within GROUPS_MAX: it starts
        where a group starts at its first contact)."""
        self.touch(group.name)
        self._subscriptions.put(group.name, group)

    def delete_subscription(self, name: str) -> bool:
        """Forget a group's config: it has the defaults again. Whether it had one."""
        return self._subscriptions.delete(name)

    def adopt_subscriptions(self, groups: list[SubscriptionGroup]) -> None:
        """A slave takes its master's configs, in one write: a group its master lacks goes."""
        kept = {group.name for group in groups}
        self._subscriptions.update({group.name: group for group in groups},
                                   [name for name in self._subscriptions.entries if name not in kept])

    def touch(self, group: str) -> None:
        """Note a group's first contact: a new group that does not read a queue from offset 0
        starts at the queue's end as of that moment (core/group_start.py)."""
        if group not in self._first_seen:
            self.add_groups({group: self.clock.now_ms()})

    @property
    def groups(self) -> dict[str, int]:
        """Every group known here -> its first contact (ms). Do not mutate."""
        return self._first_seen.entries

    def session_opened(self, group: str) -> None:
        """An official consumer's Telemetry stream got its settings: the group's consumer is live."""
        self._sessions[group] = self._sessions.get(group, 0) + 1
        self._last_heard[group] = self.clock.monotonic_ms()

    def session_closed(self, group: str) -> None:
        self._sessions[group] -= 1
        if not self._sessions[group]:
            del self._sessions[group], self._last_heard[group]

    def heard_from(self, group: str) -> None:
        """A client of the group heartbeated."""
        if group in self._sessions:
            self._last_heard[group] = self.clock.monotonic_ms()

    def live_consumers(self, group: str) -> int:
        """The group's open sessions, none once no client of the group was heard from within
        CONSUMER_SESSION_EXPIRY_MS (a frozen client's connection may stay open)."""
        heard = self._last_heard.get(group)
        if heard is None or self.clock.monotonic_ms() - heard > limits.CONSUMER_SESSION_EXPIRY_MS:
            return 0
        return self._sessions[group]

    def add_groups(self, first_seen: dict[str, int]) -> None:
        """Take the first contact of groups not known here yet, refused past GROUPS_MAX groups."""
        known = len(self._first_seen) + sum(group not in self._first_seen for group in first_seen)
        if known > limits.GROUPS_MAX:
            raise QuorumqError(Error.TOO_MANY_REQUESTS, f"this broker already knows {len(self._first_seen)} "
                                                        f"consumer groups, at most {limits.GROUPS_MAX}")
        self.adopt_groups(first_seen)

    def adopt_groups(self, first_seen: dict[str, int]) -> None:
        """Take the first contact of groups not known here yet, whatever their number: a slave
        copies its master's groups."""
        self._first_seen.update({group: ms for group, ms in first_seen.items() if group not in self._first_seen})

    def start_offset(self, group: str, topic: str, queue_id: int) -> int:
        committed = self.offsets.get(group, topic, queue_id)
        if committed is not None:
            return committed
        self.touch(group)
        head = self.store.commit_log_offset_of(topic, queue_id, 0)
        if starts_at_zero(self.config["initPopOffsetByCheckMsgInMem"], head, self.store.max_offset,
                          PHYSICAL_MEMORY_BYTES, self.config["accessMessageInMemoryMaxRatio"]):
            return 0
        return self.store.offset_for_timestamp(topic, queue_id, self.groups[group])

    def _queue(self, group: str, topic: str, queue_id: int) -> QueueLeases:
        key = (group, topic, queue_id)
        leases = self._leases.get(key)
        if leases is None:
            leases = self._leases[key] = QueueLeases(self.start_offset(group, topic, queue_id))
        return leases

    def pop(self, group: str, topic: str, queue_ids: list[int], tags: frozenset[str] | None,
            batch: int, invisible_ms: int) -> list[Delivery]:
        """Lease up to `batch` messages: expired leases first, then new messages, queue by queue."""
        now = self.clock.monotonic_ms()  # leases live in memory only: a wall-clock jump must not expire them
        deliveries: list[Delivery] = []
        for queue_id in queue_ids:
            if len(deliveries) >= batch:
                break
            leases = self._queue(group, topic, queue_id)
            for offset in leases.expired(now, batch - len(deliveries)):
                message = self._read_one(topic, queue_id, offset)
                if message is None:
                    leases.forget(offset)
                    continue
                token = self._tokens.getrandbits(63)
                lease = leases.redeliver(offset, token, now, invisible_ms)
                deliveries.append(Delivery(message, encode_handle(queue_id, offset, token), lease.attempt,
                                           invisible_ms))
            room = min(batch - len(deliveries), limits.INFLIGHT_PER_QUEUE_MAX - len(leases.leases))
            if room <= 0:
                continue
            readable_end = self._readable_end()
            result = read_messages(self.store, topic, queue_id, leases.next_offset, room, tags, readable_end)
            if result.status is GetStatus.OFFSET_TOO_SMALL:
                leases.skip_to(result.min_offset)
                result = read_messages(self.store, topic, queue_id, leases.next_offset, room, tags, readable_end)
            for message in result.messages:
                token = self._tokens.getrandbits(63)
                leases.deliver(message.queue_offset, token, now, invisible_ms)
                deliveries.append(Delivery(message, encode_handle(queue_id, message.queue_offset, token), 1,
                                           invisible_ms))
            leases.skip_to(result.next_offset)
        return deliveries

    def _read_one(self, topic: str, queue_id: int, offset: int) -> StoredMessage | None:
        result = self.store.get_messages(topic, queue_id, offset, 1, limits.PULL_BYTES_MAX, None,
                                         self._readable_end())
        return result.messages[0] if result.status is GetStatus.FOUND and result.messages else None

    def ack(self, group: str, topic: str, handle: str) -> None:
        queue_id, offset, token = decode_handle(handle)
        leases = self._leases.get((group, topic, queue_id))
        if leases is None or not leases.ack(offset, token):
            raise QuorumqError(Error.INVALID_RECEIPT_HANDLE,
                               "receipt handle expired: the message was delivered again or already acked")

    def change_invisible(self, group: str, topic: str, handle: str, invisible_ms: int) -> str:
        queue_id, offset, token = decode_handle(handle)
        leases = self._leases.get((group, topic, queue_id))
        new_token = self._tokens.getrandbits(63)
        lease = None if leases is None else leases.change_invisible(
            offset, token, new_token, self.clock.monotonic_ms(), invisible_ms)
        if lease is None:
            raise QuorumqError(Error.INVALID_RECEIPT_HANDLE,
                               "receipt handle expired: the message was delivered again or already acked")
        return encode_handle(queue_id, offset, new_token)

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Set a group's position (pull consumers, resets); its leases on that queue are dropped."""
        self._leases.pop((group, topic, queue_id), None)
        self.offsets.set(group, topic, queue_id, offset)

    def inflight(self, group: str, topic: str, queue_id: int) -> int:
        leases = self._leases.get((group, topic, queue_id))
        return 0 if leases is None else len(leases.leases)

    def committed(self, group: str, topic: str, queue_id: int) -> int | None:
        leases = self._leases.get((group, topic, queue_id))
        return leases.committed if leases is not None else self.offsets.get(group, topic, queue_id)

    def positions(self) -> list[tuple[str, str, int, int]]:
        """Every group's position: (group, topic, queue id, offset)."""
        self._settle()
        return self.offsets.items()

    def persist(self) -> None:
        """Write every group's position."""
        self._settle()
        self.offsets.persist()

    def _settle(self) -> None:
        """SimpleConsumer groups are at their lowest unacked offset."""
        for (group, topic, queue_id), leases in self._leases.items():
            self.offsets.set(group, topic, queue_id, leases.committed)

    def delete_topic(self, topic: str) -> None:
        for key in [key for key in self._leases if key[1] == topic]:
            del self._leases[key]
        self.offsets.delete_topic(topic)
