"""The FIFO lease state of a broker, replicated through its commit log (core/fifo.py decides it).

Every change of a FIFO (group, topic, queue)'s state is a record in the system topic
`rmq_sys_FIFO_LEASE` (one queue, no config: not in routes or topic lists, refused to sends), whose
body is the queue's complete new state; an ack that leaves its batch going on is the one exception
(`change_unrecorded`), carried by the queue's next record. A master appends the record and adopts
the state in the same event-loop step as its decision (`change`), so no other request sees the one
without the other; every broker applies the topic in queue order (`catch_up`): a slave after each
copy it appends and acks, a broker as it opens (from `fifoLeases.json`, written with the consumer
offsets) and as it becomes master. Applying a record replaces its queue's state; leases expire at
the applier's now plus what they had left, later than on the master that granted them (the safe
side).

A cut of the log (a slave's truncation, a torn tail at recovery) does not roll the state back:
an extra lease only delays its message until it expires, an extra ack was a consumer's ack whose
answer may have been lost.
"""

import json
import logging
from collections.abc import Callable
from pathlib import Path

from quorumq.clock import Clock
from quorumq.core import fifo
from quorumq.core.fifo import FifoQueue, QueueKey
from quorumq.errors import Error, QuorumqError, write_error
from quorumq.store import MessageIn, Store, UnindexedAppend, walk_queue, write_atomically

log = logging.getLogger("quorumq.broker")

LEASE_TOPIC = fifo.LEASE_TOPIC
FILE_NAME = "fifoLeases.json"


class LeaseLog:
    def __init__(self, store: Store, root: Path, clock: Clock, store_host: str, check_role: Callable[[], None],
                 appended: Callable[[], None]) -> None:
        self._store = store
        self._clock = clock
        self._store_host = store_host
        self._check_role = check_role  # raises unless this broker may append (a master)
        self._appended = appended  # wakes the replication of what was appended
        self.path = Path(root) / "config" / FILE_NAME
        self.queues: dict[QueueKey, FifoQueue] = {}
        self.cursor = 0  # the lease topic's next queue offset to apply
        self._changed = False

    def change(self, key: QueueKey, queue: FifoQueue, now_ms: int) -> int:
        """Append the record of `key`'s new state `queue` (decided at `now_ms`, the monotonic clock),
        then adopt it; returns the commit-log end of the record, what copies must hold for the
        change to survive a failover. Raises, changing nothing, on a broker that is not a master or
        when the store fails the append. A record the log took but could not index yet (a full disk,
        UnindexedAppend) is stored all the same and every replica applies it: it is a change like
        any other (logged), so its caller hands out, acks or waits for its copies as usual."""
        self._check_role()
        body = fifo.encode_record(key, queue, now_ms)
        try:
            appended = self._store.append([MessageIn(topic=LEASE_TOPIC, queue_id=0, body=body, properties={},
                                                     born_timestamp_ms=self._clock.now_ms(),
                                                     born_host=self._store_host)])
        except UnindexedAppend as unindexed:
            log.warning("FIFO lease record of %s/%s/%d stored but not indexed yet: %s", *key, unindexed)
            appended = unindexed.appended
        [(_, queue_offset)] = appended.offsets
        # A master applied every record as it opened or took the role, and appends only its own
        # (a damaged one applied those before its corrupt record, and its store takes no append).
        assert queue_offset == self.cursor, (queue_offset, self.cursor)
        self.cursor = queue_offset + 1
        self.queues[key] = queue
        self._changed = True
        self._appended()
        return appended.end_offset

    def change_unrecorded(self, key: QueueKey, queue: FifoQueue) -> None:
        """Adopt `key`'s new state `queue` without a record: an ack that leaves its batch going on
        (an ack's record is not waited for anyway). The queue's next record, a complete state
        (the batch done, a nack, a receive), carries it; until then a slave holds the acked lease
        too, and a failover delivers that message once more, still in order. Raises on a broker
        that is not a master."""
        self._check_role()
        self.queues[key] = queue
        self._changed = True

    def catch_up(self) -> None:
        """Apply the lease topic's records from the cursor to the end of the log, or up to the
        first one in a corrupt part of a damaged log: a slave cuts its log there as it aligns with
        its master (Broker.align_with), and the copies that take its place are applied as they
        come; a broker that raised here could not open."""
        try:
            for result in walk_queue(self._store, LEASE_TOPIC, 0, self.cursor):
                now_ms = self._clock.monotonic_ms()
                for message in result.messages:
                    try:
                        key, queue = fifo.decode_record(message.body, now_ms)
                    except ValueError as exc:
                        log.error("FIFO lease record at %d skipped: %s", message.queue_offset, exc)
                        continue
                    self.queues[key] = queue
                self.cursor = result.next_offset
                self._changed = True
        except QuorumqError as error:
            if error.error is not Error.STORE_CORRUPTED:
                raise
            log.error("FIFO lease records from %d not applied: %s", self.cursor, error)

    def log_cut(self) -> None:
        """The log was cut (a slave aligning with its master, a torn tail at recovery): the records
        past its new end are gone, the state they made stays (see the module's doc), and the
        records that take their place are applied from there. The file is written at once (a
        failure logged, for the next persist to retry): one that covers the cut records would have
        a restart skip those that take their place."""
        end = self._store.queue_max_offset(LEASE_TOPIC, 0)
        if end >= self.cursor:
            return
        self.cursor, self._changed = end, True
        try:
            self.persist()
        except QuorumqError as error:
            log.error("FIFO leases not written after a cut of the log; the next persist tries again: %s", error)

    def forget(self, key: QueueKey) -> FifoQueue | None:
        """Drop a queue's state here only, as its group no longer receives it in order; its last
        state, if it had one."""
        queue = self.queues.pop(key, None)
        self._changed |= queue is not None
        return queue

    def delete_topic(self, topic: str) -> None:
        """Drop a deleted topic's states; written at once, so that a restart does not apply its
        records again onto a topic made anew."""
        self.queues = {key: queue for key, queue in self.queues.items() if key[1] != topic}
        self._changed = True
        self.persist()

    def persist(self) -> None:
        """Write every queue's state with the lease-topic offset it covers, if anything changed."""
        if not self._changed:
            return
        now_ms = self._clock.monotonic_ms()
        data = {"cursor": self.cursor,
                "queues": [fifo.record_fields(key, queue, now_ms) for key, queue in self.queues.items()]}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_atomically(self.path, json.dumps(data, separators=(",", ":")).encode())
        except OSError as exc:  # kept as changed: the next persist tries again
            raise write_error(exc, "FIFO leases not written") from exc
        self._changed = False

    def load(self) -> None:
        """The states as last written, then the lease topic from the offset they cover: a lease
        found expires the time it had left after the restart (the safe side)."""
        try:
            data = json.loads(self.path.read_bytes())
            now_ms = self._clock.monotonic_ms()
            queues = dict(fifo.from_fields(fields, now_ms) for fields in data["queues"])
            cursor = data["cursor"]
            if type(cursor) is not int or cursor < 0:
                raise ValueError(f"cursor {cursor!r} is not a queue offset")
        except FileNotFoundError:
            queues, cursor = {}, 0
        except (ValueError, KeyError, TypeError) as exc:
            raise QuorumqError(Error.STORE_CORRUPTED, f"unreadable FIFO leases {self.path}: {exc}") from None
        self.queues, self.cursor = queues, cursor
        self.log_cut()  # a torn tail that recovery cut below what the file covers
        self.catch_up()
