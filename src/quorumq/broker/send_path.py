"""The send path of a master: admission, the append, and the wait for the flush and the copies.

Admission comes first, before a topic is created or anything stored: the role (a slave, a fenced
or a handing-over master refuses), the disk (DISK_FULL), the pending bound (TOO_MANY_REQUESTS) and
the quorum pre-check (IN_SYNC_REPLICAS_NOT_ENOUGH, core/quorum.py). Then the append, and the waits
the config asks for (RIP-34, spec rocketmq-ha.md 1.2). Each answer carries the master epoch of the
append: a master deposed during the wait does not speak for its successor.
"""

import asyncio
import logging
from collections import Counter
from dataclasses import dataclass
from functools import partial
from typing import Callable, Iterable, Mapping

from quorumq import limits
from quorumq.core import codec
from quorumq.core.codec import NAME_VALUE_SEPARATOR
from quorumq.core.properties import DLQ_ORIGIN_TOPIC, MESSAGE_ID, REAL_QUEUE_ID, REAL_TOPIC, TIMER_DELIVER_MS
from quorumq.core.properties import TRANSACTION as TRANSACTION_PROPERTY
from quorumq.core.put_status import PutStatus
from quorumq.core.quorum import AckPlan, BrokerRole, QuorumSettings, final_status, needs_copies, plan_put
from quorumq.core.recent_sends import RecentSends, StoredCopy
from quorumq.core.role import Phase
from quorumq.core.timers import TIMER_TOPIC, check_delivery
from quorumq.core.transactions import HALF_TOPIC
from quorumq.errors import Error, QuorumqError
from quorumq.store import AppendResult, MessageIn, StoredMessage, UnindexedAppend

log = logging.getLogger("quorumq.broker")


@dataclass(slots=True)
class PutResult:
    status: PutStatus | None  # None when `error` rejected the message before it was stored
    queue_id: int = -1
    queue_offset: int = -1
    error: QuorumqError | None = None
    master_epoch: int = 0  # controller mode: the epoch of the master that took it (0: none)


class SendPath:
    def __init__(self, broker) -> None:  # the Broker (broker/broker.py) this is a part of
        self._broker = broker
        self.config = broker.config
        self.pending_messages = 0
        self.recent_sends = RecentSends()

    # Admission.

    def check_role(self) -> None:
        broker = self._broker
        name = self.config["brokerName"]
        if broker.role is BrokerRole.SLAVE:
            if broker.controller_mode and broker.role_state.phase is Phase.FENCED:
                raise QuorumqError(Error.SERVICE_NOT_AVAILABLE, f"{broker.address} is fenced: the controller has "
                                                                f"not named a master of {name} yet")
            raise QuorumqError(Error.SERVICE_NOT_AVAILABLE, f"{broker.address} is a slave of {name}; its master "
                                                            "takes sends")
        if broker.handing_over:
            raise QuorumqError(Error.SERVICE_NOT_AVAILABLE, f"{broker.address} is handing the master role of "
                                                            f"{name} to its preferred broker")

    def _admit(self, count: int) -> AckPlan:
        """Admission of `count` messages: raises the refusal, or returns the plan they are stored
        under; a rejected plan (IN_SYNC_REPLICAS_NOT_ENOUGH) stores nothing."""
        self.check_role()
        stats = self._broker.stats
        if not self._broker.writable:
            stats["sendRejectedTotal"] += count
            raise QuorumqError(Error.DISK_FULL, "disk usage is above diskSpaceWarningLevelRatio; writes resume "
                                                "once space is back")
        if self.pending_messages + count > limits.PENDING_SEND_MESSAGES_MAX:
            stats["sendRejectedTotal"] += count
            raise QuorumqError(Error.TOO_MANY_REQUESTS, f"more than {limits.PENDING_SEND_MESSAGES_MAX} messages "
                                                        "wait to be stored; retry later")
        plan = self.plan_put()
        if plan.rejected:
            stats["sendRejectedTotal"] += count
        return plan

    def accepts_sends(self) -> bool:
        """Whether a send would now be acknowledged at the configured quorum: it passes admission
        and the copies in sync meet its plan (what `quorumq up` waits for before it calls a
        cluster up)."""
        try:
            self.check_role()
        except QuorumqError:
            return False
        return self._broker.writable and self.plan_put().met_by(self.in_sync_replicas(),
                                                                self._broker.sync_state_set_size())

    def quorum_settings(self) -> QuorumSettings:
        config = self.config
        return QuorumSettings(self._broker.role, config["inSyncReplicas"], config["minInSyncReplicas"],
                              config["enableAutoInSyncReplicas"], config["haMaxGapNotInSync"],
                              config["enableSlaveActingMaster"], self._broker.controller_mode,
                              config["allAckInSyncStateSet"])

    def in_sync_replicas(self) -> int:
        """The master and its slaves within haMaxGapNotInSync of the commit log's end."""
        return self._broker.replication.in_sync_replicas(self.config["haMaxGapNotInSync"])

    def plan_put(self) -> AckPlan:
        return plan_put(self.quorum_settings(), wait_store_msg_ok=True, alive_replicas=self._broker.alive_replicas,
                        ha_in_sync=self.in_sync_replicas(), sync_state_set_size=self._broker.sync_state_set_size())

    def replan_waiting(self) -> None:
        """A slave was lost: with enableSlaveActingMaster, waiting puts are planned again as a new
        put would be (quorum decision 11)."""
        settings = self.quorum_settings()
        if settings.enable_slave_acting_master:
            plan = self.plan_put()
            degraded = settings.enable_auto_in_sync_replicas and not plan.rejected
            self._broker.replication.replan_waiting(plan.need_ack if degraded else None)

    # The two send paths.

    async def put(self, messages: list[MessageIn | QuorumqError], answer_by: float | None = None,
                  dead_letters: bool = False) -> list[PutResult]:
        """Append what passed the checks with one write; wait for the flush and the copies the config
        asks for, but not past `answer_by` (the clock's monotonic time: the client's deadline). A
        message whose id this master stored recently is a client's retry: it is not stored again,
        and it gets the first copy's outcome once that copy has its quorum. `dead_letters`: the
        copies of dead letters (broker/dead_letters.py), which keep their messages' ids: they are
        remembered apart from sends (`_recent_id`), so that a dead letter's retry is answered from
        its first copy as well, and their DLQ topic takes them (Topics.writable_queue)."""
        results = [PutResult(None, error=item) if isinstance(item, QuorumqError) else None for item in messages]
        fresh: list[tuple[int, MessageIn]] = []
        retried: list[tuple[int, StoredCopy]] = []
        for index, message in enumerate(messages):
            if isinstance(message, QuorumqError):
                continue
            copy = self.recent_sends.get(_recent_id(message, dead_letters))
            if copy is not None:
                retried.append((index, copy))
            else:
                fresh.append((index, message))
        try:
            if fresh:
                plan = self._admit(len(fresh))
                for index, result in self._put_fresh(fresh, plan, dead_letters):
                    results[index] = result
                accepted = [(index, message) for index, message in fresh if results[index] is None]
                if accepted:
                    batch = [message for _, message in accepted]

                    def store_append() -> AppendResult:
                        return _noted(lambda: self._broker.store.append(batch),
                                      partial(self._remember, batch, dead_letters))

                    status, appended, epoch = await self._append(
                        plan, len(batch), Counter(message.topic for message in batch), store_append, answer_by)
                    for (index, message), (_, queue_offset) in zip(accepted, appended.offsets):
                        results[index] = PutResult(status, message.queue_id, queue_offset, master_epoch=epoch)
            if retried:
                epoch = self._broker.master_epoch
                status = await self._confirm([copy for _, copy in retried],
                                             {messages[index].topic for index, _ in retried}, answer_by)
                for index, copy in retried:
                    results[index] = PutResult(status, copy.queue_id, copy.queue_offset, master_epoch=epoch)
        except QuorumqError as error:  # refused whole: disk full, overload, a slave, a store that stopped
            for index in [index for index, _ in fresh] + [index for index, _ in retried]:
                if results[index] is None:
                    results[index] = PutResult(None, error=error)
        metrics = self._broker.metrics
        if metrics is not None:
            for result in results:
                metrics.answered(result.status.name if result.error is None else result.error.error.name)
        return results

    def _put_fresh(self, fresh: list[tuple[int, MessageIn]], plan: AckPlan,
                   dead_letters: bool) -> list[tuple[int, PutResult]]:
        """The answers known before the append: every message when the plan is rejected, else the
        ones whose queue is refused (a topic is created here, once admission let the send in)."""
        if plan.rejected:
            epoch = self._broker.master_epoch
            return [(index, PutResult(PutStatus.IN_SYNC_REPLICAS_NOT_ENOUGH, message.queue_id, master_epoch=epoch))
                    for index, message in fresh]
        refused = []
        for index, message in fresh:
            try:
                message.queue_id = self._broker.topics.writable_queue(message.topic, message.queue_id,
                                                                      message.properties, dead_letters)
                if not dead_letters:
                    self._park(message)
            except QuorumqError as error:
                refused.append((index, PutResult(None, error=error)))
        return refused

    def _park(self, message: MessageIn) -> None:
        """A delay message (broker/timers.py) or a transactional one (broker/transactions.py) is
        stored in its system topic, its real topic and queue in its properties, until it is due or
        committed."""
        props = message.properties
        if props.get(TRANSACTION_PROPERTY) == "true":
            self._broker.transactions.check_room()
            system_topic = HALF_TOPIC
        elif TIMER_DELIVER_MS in props:
            check_delivery(int(props[TIMER_DELIVER_MS]), self._broker.clock.now_ms(), self.config["timerMaxDelaySec"])
            system_topic = TIMER_TOPIC
        else:
            return
        message.properties = {**props, REAL_TOPIC: message.topic, REAL_QUEUE_ID: str(message.queue_id)}
        message.topic, message.queue_id = system_topic, 0

    def unpark(self, stored: StoredMessage) -> MessageIn:
        """A due timer or a committed half message as a send to its topic, its queue checked again:
        raises when the topic is gone or not writable; a queue the topic no longer has is replaced."""
        message = unparked(stored)
        topics = self._broker.topics
        try:
            message.queue_id = topics.writable_queue(message.topic, message.queue_id, message.properties, False)
        except QuorumqError as error:
            if error.error is not Error.BAD_REQUEST:
                raise
            message.queue_id = topics.writable_queue(message.topic, -1, message.properties, False)
        return message

    async def put_records(self, records: list[MessageIn], noted: Callable[[AppendResult], None],
                          answer_by: float | None = None) -> PutStatus:
        """Append records the broker made, addressed already (due timers' copies and their done
        record, a commit's copy and its op record), in one write, admitted and waited for as a send.
        `noted(appended)` runs in the step of the append, also when the records reached the log
        unindexed (a full disk). A refusal by admission raises, having stored nothing."""
        plan = self._admit(len(records))
        if plan.rejected:
            raise QuorumqError(Error.SERVICE_NOT_AVAILABLE,
                               f"not stored: {PutStatus.IN_SYNC_REPLICAS_NOT_ENOUGH.value}")
        status, _, _ = await self._append(plan, len(records), Counter(record.topic for record in records),
                                          lambda: _noted(lambda: self._broker.store.append(records), noted),
                                          answer_by)
        return status

    async def put_encoded(self, topic: str, queue_id: int, records: bytes, count: int, request_id: str = "",
                          answer_by: float | None = None) -> PutResult:
        """Append records a producer encoded for one queue (store.append_encoded), through the same
        admission and flush wait as `put`. Answers the status and the first record's queue offset;
        a refusal raises, since the records are stored all or none. IN_SYNC_REPLICAS_NOT_ENOUGH
        stores none: its queue offset is -1. A resend (`request_id`, its first record's message id,
        stored recently for the same queue, core/recent_sends.py) is answered from the first copy."""
        metrics = self._broker.metrics
        try:
            result = await self._put_encoded(topic, queue_id, records, count, request_id, answer_by)
        except QuorumqError as error:
            if metrics is not None:
                metrics.answered(error.error.name, count)
            raise
        if metrics is not None:
            metrics.answered(result.status.name, count)
        return result

    async def _put_encoded(self, topic: str, queue_id: int, records: bytes, count: int, request_id: str,
                           answer_by: float | None) -> PutResult:
        copy = self.recent_sends.batch(request_id, queue_id, count, lambda: _last_message_id(records))
        if copy is not None:
            epoch = self._broker.master_epoch
            return PutResult(await self._confirm([copy], [topic], answer_by), queue_id, copy.queue_offset,
                             master_epoch=epoch)
        plan = self._admit(count)
        if plan.rejected:
            return PutResult(PutStatus.IN_SYNC_REPLICAS_NOT_ENOUGH, queue_id, master_epoch=self._broker.master_epoch)
        rules = self._broker.topics.writable_records_queue(topic, queue_id, records, count)
        max_body_bytes = self.config["maxMessageSize"]

        def append() -> AppendResult:
            return _noted(lambda: self._broker.store.append_encoded(topic, queue_id, records, count, max_body_bytes,
                                                                     rules.check),
                          lambda appended: self.recent_sends.add(
                              request_id, StoredCopy(queue_id, appended.offsets[0][1], appended.end_offset, count)))

        status, appended, epoch = await self._append(plan, count, {topic: count}, append, answer_by)
        return PutResult(status, queue_id, appended.offsets[0][1], master_epoch=epoch)

    async def delete_topic(self, topic: str) -> None:
        """A master's deletion of a topic, admitted and waited for as a send: its config goes, then
        a deletion record in the log drops its queues here and, as they copy it, on every member,
        so a failover after the answer cannot bring the topic back (store/append.py)."""
        plan = self._admit(1)
        if plan.rejected:
            raise QuorumqError(Error.SERVICE_NOT_AVAILABLE, f"topic {topic} not deleted: "
                                                            f"{PutStatus.IN_SYNC_REPLICAS_NOT_ENOUGH.value}")
        broker = self._broker
        broker.topics.forget(topic)
        if not broker.store.delete_topic(topic):
            return  # no queues, no record: nothing on any member to drop
        broker.replication.notify_appended()
        status = await self._await_copies(broker.store.max_offset, plan.need_ack, (), None)
        if status is not PutStatus.PUT_OK:
            raise QuorumqError(Error.SLAVE_PERSISTENCE_TIMEOUT, f"topic {topic} deleted here, but its deletion "
                                                                f"record is not held as a send needs: {status.value}")

    def admit_record(self) -> int:
        """Admission of a FIFO lease record that hands messages out (broker/lease_log.py), as of a
        send, before anything is decided: the copies its wait needs (`await_record`), or the refusal."""
        plan = self._admit(0)
        if plan.rejected:
            raise QuorumqError(Error.SERVICE_NOT_AVAILABLE, f"FIFO messages are not handed out: "
                                                            f"{PutStatus.IN_SYNC_REPLICAS_NOT_ENOUGH.value}")
        return plan.need_ack

    async def await_record(self, end_offset: int, need_ack: int, answer_by: float | None) -> None:
        """Wait, as for a send, until the flush and `need_ack` copies hold the log below `end_offset`;
        raises when they do not in time."""
        status = await self._await_copies(end_offset, need_ack, (), answer_by)
        if status is not PutStatus.PUT_OK:
            raise QuorumqError(Error.SLAVE_PERSISTENCE_TIMEOUT, f"the FIFO lease record is not held as a send "
                                                                f"needs: {status.value}; the messages are leased "
                                                                "until their invisible time passes")

    async def _confirm(self, copies: list[StoredCopy], topics: Iterable[str], answer_by: float | None) -> PutStatus:
        """A client's resend of what this master stored (to `topics`): the first copies' outcome,
        once they have what the current settings need."""
        self.check_role()
        self._broker.store.index_pending()  # a first copy a full disk left unindexed is readable once answered
        return await self._await_copies(max(copy.end_offset for copy in copies), self.plan_put().need_ack,
                                        topics, answer_by)

    async def _append(self, plan: AckPlan, count: int, topics: Mapping[str, int],
                      store_append: Callable[[], AppendResult],
                      answer_by: float | None) -> tuple[PutStatus, AppendResult, int]:
        """Every send path's append, once admitted under `plan`: `store_append` (one write of `count` messages,
        `topics` counting them per topic), waking the slaves' senders and the topics' long polls,
        then the flush and replica waits. Returns the master epoch of the append with the status:
        the epoch may change during the wait."""
        broker = self._broker
        self.pending_messages += count
        try:
            try:
                appended = store_append()
            except UnindexedAppend:
                self._wake(topics)  # in the log all the same: the slaves copy them
                raise
            epoch = broker.master_epoch
            broker.stats["msgPutTotal"] += count
            if broker.metrics is not None:
                broker.metrics.stored(topics, appended)
            # Stored messages are readable at once, as RocketMQ dispatches them before any wait
            # (with a read bound, once the members hold them: readable_end); a send cancelled
            # during its wait must not leave long polls asleep.
            self._wake(topics)
            status = await self._await_copies(appended.end_offset, plan.need_ack, topics, answer_by)
            if broker.readable_end() is not None:  # readable only now that the members hold them
                for topic in topics:
                    broker.arrivals.notify(topic)
        finally:
            self.pending_messages -= count
        return status, appended, epoch

    def _wake(self, topics: Iterable[str]) -> None:
        """Records were appended: wake the slaves' senders and the long polls of `topics`."""
        self._broker.replication.notify_appended()
        for topic in topics:
            self._broker.arrivals.notify(topic)

    async def _await_copies(self, end_offset: int, need_ack: int, topics: Iterable[str],
                            answer_by: float | None) -> PutStatus:
        """Wait, side by side, for the flush the config asks for (syncFlushTimeout) and for
        `need_ack` copies (the master's included) of everything below `end_offset` (slaveTimeout),
        each cut short at `answer_by` so the client gets a status rather than its own timeout;
        the replica outcome wins. A PUT_OK then waits, by the same deadline, for the members to
        hold those of `topics` auto-created here (Topics.held), which raises as a topic update's
        wait does."""
        broker = self._broker
        now = broker.clock.monotonic()
        answer_by = float("inf") if answer_by is None else answer_by
        flush = replicas = None
        if self.config["flushDiskType"] == "SYNC_FLUSH":
            flush_by = min(now + self.config["syncFlushTimeout"] / 1000, answer_by)
            flush = broker.flusher.wait_flushed(end_offset, max(flush_by - now, 0.0))
        replicas_by = min(now + self.config["slaveTimeout"] / 1000, answer_by)
        if needs_copies(need_ack):
            replicas = broker.replication.wait_acked(end_offset, need_ack, replicas_by)
        flushed, replica_status = True, PutStatus.PUT_OK
        if flush is not None and replicas is not None:
            flushed, replica_status = await asyncio.gather(flush, replicas)
        elif flush is not None:
            flushed = await flush
        elif replicas is not None:
            replica_status = await replicas
        status = final_status(PutStatus.PUT_OK if flushed else PutStatus.FLUSH_DISK_TIMEOUT, replica_status)
        if status is PutStatus.PUT_OK:  # a send answered otherwise is not acknowledged: it need not wait
            await broker.topics.held(topics, replicas_by)
        return status

    # Recent sends: a producer's resend is answered from the first copy.

    def _remember(self, batch: list[MessageIn], dead_letters: bool, appended: AppendResult) -> None:
        """Note the ids of what was just stored, before any wait, so a retry during the wait finds them."""
        broker = self._broker
        for message, (_, queue_offset) in zip(batch, appended.offsets):
            self.recent_sends.add(_recent_id(message, dead_letters),
                                  StoredCopy(message.queue_id, queue_offset, appended.end_offset))
            if message.topic == TIMER_TOPIC:
                broker.timers.added(message, queue_offset)
            elif message.topic == HALF_TOPIC:
                broker.transactions.added(queue_offset)

    def forget_recent_sends(self) -> None:
        self.recent_sends = RecentSends()

    def recall_recent_sends(self) -> None:
        """Remember the sends of the log's tail, as the master that stored them did: a producer's
        resend after a failover (or a restart) is then answered from the copy this log holds."""
        clock = self._broker.clock
        started = clock.monotonic()
        self.recent_sends = RecentSends()
        try:
            recalled = self._broker.store.recent_message_ids(limits.RECENT_MESSAGE_IDS_MAX)
        except QuorumqError as error:  # a damaged tail: the role matters more than deduplication
            log.error("recalling recent message ids from the log failed (%s): resends of what it holds may be "
                      "stored again", error)
            recalled = []
        for message_id, queue_id, queue_offset, end_offset in recalled:
            self.recent_sends.add(message_id, StoredCopy(queue_id, queue_offset, end_offset))
        log.info("recalled %d recent message ids from the log in %.3f s", len(self.recent_sends),
                 clock.monotonic() - started)


def _recent_id(message: MessageIn, dead_letter: bool) -> str:
    """What a stored copy is remembered by (RecentSends): a send's message id. A dead letter's copy
    keeps its message's id, so it goes by its DLQ topic and origin topic too, joined by a separator
    no stored message id holds (codec.encode_properties refuses it): never taken for a send."""
    message_id = message.properties.get(MESSAGE_ID, "")
    if not (dead_letter and message_id):
        return message_id
    return NAME_VALUE_SEPARATOR.join((message.topic, message.properties.get(DLQ_ORIGIN_TOPIC, ""), message_id))


def unparked(stored: StoredMessage) -> MessageIn:
    """A parked message (SendPath._park) as a send to its real topic and queue."""
    props = dict(stored.properties)
    topic, queue_id = props.pop(REAL_TOPIC), int(props.pop(REAL_QUEUE_ID))
    return MessageIn(topic=topic, queue_id=queue_id, body=stored.body, properties=props, flag=stored.flag,
                     born_timestamp_ms=stored.born_timestamp_ms, born_host=stored.born_host)


def _noted(append: Callable[[], AppendResult], note: Callable[[AppendResult], None]) -> AppendResult:
    """`append()`, its result passed to `note` first; also when its records reached the log but their
    consume-queue entries could not be written (UnindexedAppend, a full disk): they are stored all
    the same, so a producer's resend must be answered from them, not stored again."""
    try:
        appended = append()
    except UnindexedAppend as unindexed:
        note(unindexed.appended)
        raise
    note(appended)
    return appended


def _last_message_id(records: bytes) -> str:
    """The message id of the last of a producer's encoded records ("" when they do not parse:
    storing them refuses them with the reason)."""
    position = codec.last_record_position(records)
    try:
        return codec.message_property(records, position, MESSAGE_ID) if position is not None else ""
    except ValueError:
        return ""
