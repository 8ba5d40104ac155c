"""Consumer groups on one broker: their subscription configs, committed offsets, SimpleConsumer
leases and receipt handles.

The committed offset of a (group, topic, queue) is the single source of progress: pull consumers
set it directly, SimpleConsumer groups move it to their lowest unacked offset. A group's first
receive from a queue fixes where it starts there (core/group_start.py); that start is its offset
from then on, persisted with the others.

A FIFO group (consumeMessageOrderly) receives a FIFO topic's queues one batch at a time
(core/fifo.py); their state is replicated through the commit log (broker/lease_log.py), and its
position on such a queue is its batch's start. Any other group's leases live in memory only, so
after a restart or a failover everything unacked is delivered again (at least once) and attempt
counts start afresh. A message that had its group's max_attempts deliveries is a dead letter when
its lease expires: the receive that finds it copies it to the group's DLQ topic
(broker/dead_letters.py) instead of delivering it.
"""

import logging
import os
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from quorumq import limits
from quorumq.broker.lease_log import LeaseLog
from quorumq.clock import Clock
from quorumq.config import Config
from quorumq.core import fifo, properties
from quorumq.core.fifo import FifoQueue, QueueKey, Step
from quorumq.core.group_start import starts_at_zero
from quorumq.core.leases import QueueLeases, spent
from quorumq.core.subscription import SubscriptionGroup, group_data, group_from_data
from quorumq.errors import Error, QuorumqError
from quorumq.store import ConsumerOffsets, GetResult, GetStatus, KeyedLog, Store, StoredMessage, tag_hash

log = logging.getLogger("quorumq.broker")

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


@dataclass(slots=True)
class DeadLetter:
    """A message to copy to its group's DLQ topic; then its lease (`receipt_handle`) is dropped."""
    message: StoredMessage
    receipt_handle: str
    attempts: int  # the deliveries it had


@dataclass(slots=True)
class Popped:
    """What a receive took: messages to deliver, dead letters to write first, and for a FIFO
    group the commit-log end of the lease records that hand the deliveries out: the answer waits
    until the copies hold them, as a send's does."""
    deliveries: list[Delivery]
    dead_letters: list[DeadLetter]
    record_end: int | None = None


STALE_HANDLE = "receipt handle expired: the message was delivered again or already acked"


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


def read_one(store: Store, topic: str, queue_id: int, offset: int) -> StoredMessage | None:
    """The message at `offset` of a queue, whatever the readable end; None when the store does not
    hold it (retention took it, or a cut of the log)."""
    result = store.get_messages(topic, queue_id, offset, 1, limits.PULL_BYTES_MAX)
    if result.status is GetStatus.FOUND and result.messages and result.messages[0].queue_offset == offset:
        return result.messages[0]
    return None


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
                 readable_end: Callable[[], int | None], lease_log: LeaseLog | None = None,
                 fifo_topic: Callable[[str], bool] = lambda topic: False) -> None:
        """`lease_log`: the broker's; without one (tests), a log that appends as a master's would.
        `fifo_topic`: whether a topic is a FIFO topic."""
        self.store = store
        self.lease_log = lease_log or LeaseLog(store, root, clock, store_host="", check_role=lambda: None,
                                               appended=lambda: None)
        self.lease_log.load()
        self._fifo_topic = fifo_topic
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

    def in_order(self, group: SubscriptionGroup, topic: str) -> bool:
        """Whether the group receives the topic in order: a FIFO group on a FIFO topic. A request
        decides it once and passes it on, so that its admission and its lease records agree."""
        return group.consume_message_orderly and self._fifo_topic(topic)

    def _queue(self, key: QueueKey) -> QueueLeases:
        leases = self._leases.get(key)
        if leases is None:
            # A queue its group received in order until now goes on from its batch's start.
            fifo_queue = self.lease_log.forget(key)
            if fifo_queue is not None:
                self.offsets.set(*key, fifo_queue.committed)
            leases = self._leases[key] = QueueLeases(self.start_offset(*key))
        return leases

    def _fifo_queue(self, key: QueueKey) -> FifoQueue:
        queue = self.lease_log.queues.get(key)
        if queue is None:
            # A queue its group received unordered until now starts in order at its lowest
            # unacked offset; those leases end (their messages come again, in order). The
            # position is set at once: no record may follow if nothing lies there yet.
            leases = self._leases.pop(key, None)
            if leases is not None:
                self.offsets.set(*key, leases.committed)
            start = self.start_offset(*key)
            queue = FifoQueue(start, start)
        return queue

    def _token(self) -> int:
        return self._tokens.getrandbits(63)

    def _dead_letter_hold_ms(self) -> int:
        """How long a dead letter is held while its copy is written: past the longest a send
        waits (slaveTimeout, syncFlushTimeout), so that no other receive writes it again."""
        return 2 * max(self.config["slaveTimeout"], self.config["syncFlushTimeout"])

    def pop(self, group: str, topic: str, queue_ids: list[int], tags: frozenset[str] | None,
            batch: int, invisible_ms: int, in_order: bool) -> Popped:
        """Lease up to `batch` messages, queue by queue: expired leases first (those that had the
        group's max_attempts deliveries become dead letters), then new messages. In order (see
        `in_order`), the queues go by core/fifo.py, each change a lease record appended here."""
        now = self.clock.monotonic_ms()  # leases live in memory only: a wall-clock jump must not expire them
        max_attempts = self.group(group).max_attempts
        popped = Popped([], [])
        for queue_id in queue_ids:
            room = batch - len(popped.deliveries)
            if room <= 0:
                break
            key = (group, topic, queue_id)
            if not in_order:
                self._pop_queue(key, tags, room, invisible_ms, max_attempts, now, popped)
                continue
            try:
                taken = self._pop_in_order(key, tags, room, invisible_ms, max_attempts, now)
            except QuorumqError as error:
                # The queue's record was not appended (the store failed, or this broker is no
                # longer the master): what the earlier queues' records hand out goes out, this
                # queue and the rest wait. The receive fails only when it took nothing.
                if not (popped.deliveries or popped.dead_letters):
                    raise
                log.warning("group %s: a receive of %s stops before queue %d: %s", group, topic, queue_id, error)
                break
            popped.deliveries += taken.deliveries
            popped.dead_letters += taken.dead_letters
            if taken.record_end is not None:
                popped.record_end = taken.record_end
        return popped

    def _pop_queue(self, key: QueueKey, tags: frozenset[str] | None, room: int, invisible_ms: int,
                   max_attempts: int, now: int, popped: Popped) -> None:
        _, topic, queue_id = key
        leases = self._queue(key)
        delivered = len(popped.deliveries)
        for offset in leases.expired(now, room):
            message = self._read_one(topic, queue_id, offset)
            if message is None:
                leases.forget(offset)
                continue
            token = self._token()
            handle = encode_handle(queue_id, offset, token)
            if spent(leases.leases[offset].attempt, max_attempts):
                lease = leases.hold(offset, token, now, self._dead_letter_hold_ms())
                popped.dead_letters.append(DeadLetter(message, handle, lease.attempt))
            else:
                lease = leases.redeliver(offset, token, now, invisible_ms)
                popped.deliveries.append(Delivery(message, handle, lease.attempt, invisible_ms))
        room = min(room - (len(popped.deliveries) - delivered), limits.INFLIGHT_PER_QUEUE_MAX - len(leases.leases))
        if room <= 0:
            return
        readable_end = self._readable_end()
        result = read_messages(self.store, topic, queue_id, leases.next_offset, room, tags, readable_end)
        if result.status is GetStatus.OFFSET_TOO_SMALL:
            leases.skip_to(result.min_offset)
            result = read_messages(self.store, topic, queue_id, leases.next_offset, room, tags, readable_end)
        for message in result.messages:
            token = self._token()
            leases.deliver(message.queue_offset, token, now, invisible_ms)
            popped.deliveries.append(Delivery(message, encode_handle(queue_id, message.queue_offset, token), 1,
                                              invisible_ms))
        leases.skip_to(result.next_offset)

    def _pop_in_order(self, key: QueueKey, tags: frozenset[str] | None, room: int, invisible_ms: int,
                      max_attempts: int, now: int) -> Popped:
        """One step of a FIFO queue (core/fifo.py): a new batch, the expired batch again, or its
        spent messages held for the dead-letter writer; the new state is appended as a record in
        the same event-loop step (raises, taking nothing, when the append fails)."""
        _, topic, queue_id = key
        queue = before = self._fifo_queue(key)
        step, leases = fifo.next_step(queue, now, max_attempts)
        taken = Popped([], [])
        if step is Step.BLOCKED:
            return taken
        tokens: dict[int, int] = {}
        if step is Step.NEXT_BATCH:
            readable_end = self._readable_end()
            result = read_messages(self.store, topic, queue_id, queue.end, room, tags, readable_end)
            if result.status is GetStatus.OFFSET_TOO_SMALL:
                queue = fifo.skip_to(queue, result.min_offset)
                result = read_messages(self.store, topic, queue_id, queue.end, room, tags, readable_end)
            for message in result.messages:
                token = tokens[message.queue_offset] = self._token()
                taken.deliveries.append(Delivery(message, encode_handle(queue_id, message.queue_offset, token), 1,
                                                  invisible_ms))
            queue = fifo.next_batch(queue, tokens, max(result.next_offset, queue.end), now, invisible_ms)
        else:
            gone = []
            for lease in leases:
                if step is Step.REDELIVER and len(tokens) >= room:
                    break  # the rest waits behind what goes now
                message = self._read_one(topic, queue_id, lease.offset)
                if message is None:
                    gone.append(lease.offset)
                    continue
                token = tokens[lease.offset] = self._token()
                handle = encode_handle(queue_id, lease.offset, token)
                if step is Step.REDELIVER:
                    taken.deliveries.append(Delivery(message, handle, lease.attempt + 1, invisible_ms))
                else:
                    taken.dead_letters.append(DeadLetter(message, handle, lease.attempt))
            if step is Step.REDELIVER:
                queue = fifo.redeliver(queue, tokens, gone, now, invisible_ms)
            else:
                for offset in gone:
                    queue = fifo.forget(queue, offset)
                if tokens:
                    queue = fifo.hold_dead_letters(queue, tokens, now, self._dead_letter_hold_ms())
        if queue != before:
            end = self.lease_log.change(key, queue, now)
            if tokens and step is not Step.DEAD_LETTER:
                taken.record_end = end
        return taken

    def _read_one(self, topic: str, queue_id: int, offset: int) -> StoredMessage | None:
        """A message handed out before; None once the store no longer holds it. Not bound by the
        readable end: a new master may not know yet that its members hold what the old one
        handed out, and a leased message must not be taken for gone."""
        return read_one(self.store, topic, queue_id, offset)

    def ack(self, group: str, topic: str, handle: str) -> bool:
        """Drop the lease `handle` holds (an ack, or its dead letter written). True when that ended
        a FIFO queue's batch: the queue hands out again."""
        queue_id, offset, token = decode_handle(handle)
        key = (group, topic, queue_id)
        queue = self.lease_log.queues.get(key)
        if queue is not None:
            acked = fifo.ack(queue, offset, token)
            if acked is None:
                raise QuorumqError(Error.INVALID_RECEIPT_HANDLE, STALE_HANDLE)
            if acked.leases:  # the batch goes on: the queue's next record carries the ack (lease_log)
                self.lease_log.change_unrecorded(key, acked)
            else:
                self.lease_log.change(key, acked, self.clock.monotonic_ms())  # not waited for: see lease_log
            return not acked.leases
        leases = self._leases.get(key)
        if leases is None or not leases.ack(offset, token):
            raise QuorumqError(Error.INVALID_RECEIPT_HANDLE, STALE_HANDLE)
        return False

    def change_invisible(self, group: str, topic: str, handle: str, invisible_ms: int,
                         in_order: bool) -> tuple[str, int | None]:
        """The lease `handle` holds, visible again after `invisible_ms`: its new handle, and when
        the group receives in order (`in_order`) the commit-log end of the lease record to wait
        for before answering."""
        queue_id, offset, token = decode_handle(handle)
        new_token = self._token()
        _, record_end = self._relet((group, topic, queue_id), offset, token, new_token, invisible_ms, in_order)
        return encode_handle(queue_id, offset, new_token), record_end

    def dead_letter(self, group: str, topic: str, handle: str, in_order: bool) -> DeadLetter:
        """The message a valid `handle` holds, as a dead letter (ForwardMessageToDeadLetterQueue),
        held for the dead-letter writer as a receive holds one, so that its lease cannot end while
        its copy is written; under the same handle, which the client's retry of a forward that
        failed still holds. A message no longer stored is refused before its hold is recorded."""
        queue_id, offset, token = decode_handle(handle)
        message = self._read_one(topic, queue_id, offset)
        if message is None:
            raise QuorumqError(Error.INVALID_RECEIPT_HANDLE, f"the message at {topic}/{queue_id}/{offset} is no "
                                                             "longer stored")
        attempt, _ = self._relet((group, topic, queue_id), offset, token, token, self._dead_letter_hold_ms(), in_order)
        return DeadLetter(message, handle, attempt)

    def _relet(self, key: QueueKey, offset: int, token: int, new_token: int, invisible_ms: int,
               in_order: bool) -> tuple[int, int | None]:
        """The lease at `offset` held by `token`, visible again after `invisible_ms` under
        `new_token`: its attempt count, and in order the commit-log end of its record. A lease of
        the group's other mode has ended (`_queue`, `_fifo_queue`): its handle is stale."""
        now = self.clock.monotonic_ms()
        if in_order:
            queue = self.lease_log.queues.get(key)
            changed = None if queue is None else fifo.change_invisible(queue, offset, token, new_token, now,
                                                                      invisible_ms)
            if changed is None:
                raise QuorumqError(Error.INVALID_RECEIPT_HANDLE, STALE_HANDLE)
            lease = changed.lease(offset)
            assert lease is not None, (changed, offset)
            return lease.attempt, self.lease_log.change(key, changed, now)
        leases = self._leases.get(key)
        held = None if leases is None else leases.change_invisible(offset, token, new_token, now, invisible_ms)
        if held is None:
            raise QuorumqError(Error.INVALID_RECEIPT_HANDLE, STALE_HANDLE)
        return held.attempt, None

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Set a group's position (pull consumers, resets); its leases on that queue are dropped.
        A FIFO queue's reset is a lease record, so every replica resets it in the log's order."""
        key = (group, topic, queue_id)
        self._leases.pop(key, None)
        if key in self.lease_log.queues:
            self.lease_log.change(key, FifoQueue(offset, offset), self.clock.monotonic_ms())
        self.offsets.set(group, topic, queue_id, offset)

    def adopt_position(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """A slave takes its master's position of a queue, except where the lease log holds the
        queue's state while its group receives it in order: there the log is the authority."""
        key = (group, topic, queue_id)
        if key in self.lease_log.queues and self.in_order(self.group(group), topic):
            return
        self.lease_log.forget(key)
        if self.committed(group, topic, queue_id) != offset:
            self._leases.pop(key, None)
            self.offsets.set(group, topic, queue_id, offset)

    def inflight(self, group: str, topic: str, queue_id: int) -> int:
        key = (group, topic, queue_id)
        queue = self.lease_log.queues.get(key)
        if queue is not None:
            return len(queue.leases)
        leases = self._leases.get(key)
        return 0 if leases is None else len(leases.leases)

    def committed(self, group: str, topic: str, queue_id: int) -> int | None:
        key = (group, topic, queue_id)
        queue = self.lease_log.queues.get(key)
        if queue is not None:
            return queue.committed
        leases = self._leases.get(key)
        return leases.committed if leases is not None else self.offsets.get(group, topic, queue_id)

    def positions(self) -> list[tuple[str, str, int, int]]:
        """Every group's position: (group, topic, queue id, offset)."""
        self._settle()
        return self.offsets.items()

    def persist(self) -> None:
        """Write every group's position, and the FIFO queues' states (the periodic write, close)."""
        self.persist_offsets()
        self.lease_log.persist()

    def persist_offsets(self) -> None:
        """Write every group's position only, where that is on a hot path (a commit with
        SYNC_FLUSH, each metadata copy a slave takes): the FIFO states come from the lease log
        after a restart, from the offset fifoLeases.json covers."""
        self._settle()
        self.offsets.persist()

    def _settle(self) -> None:
        """SimpleConsumer groups are at their lowest unacked offset, FIFO groups at their batch's start."""
        for (group, topic, queue_id), leases in self._leases.items():
            self.offsets.set(group, topic, queue_id, leases.committed)
        for (group, topic, queue_id), queue in self.lease_log.queues.items():
            self.offsets.set(group, topic, queue_id, queue.committed)

    def delete_topic(self, topic: str) -> None:
        for key in [key for key in self._leases if key[1] == topic]:
            del self._leases[key]
        self.lease_log.delete_topic(topic)
        self.offsets.delete_topic(topic)
