"""The broker's RocketMQ v5 endpoint: apache.rocketmq.v2.MessagingService over the broker.

Every answer carries a top-level status; a request the broker cannot serve gets a catalogue code,
and an unexpected failure is logged and answered INTERNAL_ERROR while the server keeps serving.
"""

import asyncio
import contextlib
import logging
from typing import Awaitable, Callable

from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp
from rocketmq.grpc_protocol import definition_pb2 as v5
from rocketmq.grpc_protocol import service_pb2 as v5s

from quorumq import limits
from quorumq.broker.broker import Broker
from quorumq.broker.consumers import DeadLetter, Delivery
from quorumq.broker.dead_letters import ahead_of
from quorumq.broker.send_path import PutResult
from quorumq.clock import Clock
from quorumq.cluster import cluster_pb2 as pb
from quorumq.core.subscription import SubscriptionGroup
from quorumq.core.timers import encode_recall_handle
from quorumq.core.transactions import Decision, encode_transaction_id
from quorumq.endpoint import messages
from quorumq.errors import Error, QuorumqError
from quorumq.protocol.authentication import check_settings
from quorumq.protocol.constants import EXPLICIT_QUEUE_HEADER
from quorumq.protocol.messages import incoming, stored_status
from quorumq.protocol.v5 import (
    NO_NEW_MESSAGE,
    OK,
    UnservedMessagingService,
    answers,
    assignments,
    error_status,
    failure_status,
    group_name,
    route_response,
    settings_reply,
    status,
    topic_name,
)
from quorumq.store import GetStatus, MessageIn

log = logging.getLogger("quorumq.endpoint")

CODE_OK = v5.Code.OK  # enum look-ups through the generated wrapper are slow on the hot path
TRANSACTION_TYPE = v5.MessageType.TRANSACTION
POLL_MARGIN_S = 0.3  # answer a long poll this long before the client's deadline
ANSWER_MARGIN_S = 0.2  # end a send's flush and replica waits this long before the client's deadline
LEASE_RECHECK_S = 1.0  # a long poll also wakes this often to find expired leases
_NO_GROUP = "-"  # settings that name no group get the defaults of a group
# A producer's resolution; an unspecified one (its checker answered UNKNOWN) decides nothing.
_DECISIONS = {v5.TransactionResolution.COMMIT: Decision.COMMIT, v5.TransactionResolution.ROLLBACK: Decision.ROLLBACK}


def _seconds(duration: Duration) -> float:
    return duration.seconds + duration.nanos / 1e9


def _poll_budget(requested: Duration | None, context) -> float:
    return poll_budget(_seconds(requested) if requested is not None else 0.0, context)


def answer_by(context, clock: Clock) -> float | None:
    """When a send must be answered (the clock's monotonic time): a little before the client's deadline."""
    remaining = context.time_remaining()
    return None if remaining is None else clock.monotonic() + remaining - ANSWER_MARGIN_S


def poll_budget(requested_s: float, context) -> float:
    """How long a long poll may hold: what the client asked, within the limit and its deadline."""
    wanted = min(requested_s, limits.LONG_POLL_SECONDS_MAX)
    remaining = context.time_remaining()
    if remaining is not None:
        wanted = min(wanted, remaining - POLL_MARGIN_S)
    return max(wanted, 0.0)


def _answer_limit(context) -> int | None:
    """The largest answer the calling client receives: None for the official clients that lift
    gRPC's limit (by the x-mq-language header they send), gRPC's default for any other."""
    language = dict(context.invocation_metadata() or ()).get("x-mq-language")
    return None if language in limits.UNLIMITED_RECEIVE_LANGUAGES else limits.RECEIVE_ANSWER_BYTES_MAX


def _entry_status(result: PutResult) -> v5.Status:
    return error_status(result.error) if result.error is not None else stored_status(result.status,
                                                                                     result.master_epoch)


class MessagingService(UnservedMessagingService):
    serving = "the broker"

    def __init__(self, broker: Broker, route_lookup: Callable[[str], Awaitable[pb.TopicRoute | None]]) -> None:
        self.broker = broker
        self.route_lookup = route_lookup
        self._receive_turn = 0

    # Routes and client sessions.

    @answers(v5s.QueryRouteResponse)
    async def QueryRoute(self, request, context):
        return route_response(await self.route_lookup(topic_name(request.topic)), request.topic)

    @answers(v5s.HeartbeatResponse)
    async def Heartbeat(self, request, context):
        if request.HasField("group") and request.group.name:
            group = group_name(request.group)
            self.broker.consumers.touch(group)
            self.broker.consumers.heard_from(group)
        return v5s.HeartbeatResponse(status=OK)

    async def Telemetry(self, request_iterator, context):
        """A refused setting (an illegal group, say) is answered on the stream by a command that
        carries only its status, which ends the Node.js client's startup with the error; the stream
        stays open, so the client does not reopen it and ask again every second. A producer's
        stream also carries the broker's transaction checks (broker/transactions.py)."""
        outbox: asyncio.Queue = asyncio.Queue()  # what goes to the client; None ends the stream
        reader = asyncio.ensure_future(self._read_telemetry(request_iterator, context, outbox))
        try:
            while (command := await outbox.get()) is not None:
                yield command
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader

    async def _read_telemetry(self, request_iterator, context, outbox: asyncio.Queue) -> None:
        session = None  # what the connection metrics count this stream as, once its settings came
        consumer_group = None  # the group whose live consumer this stream is (broker/consumers.py)
        published: list[str] = []  # the topics this stream's producer publishes (transaction checks)

        def check(half, transaction_id: str) -> None:
            outbox.put_nowait(v5s.TelemetryCommand(
                recover_orphaned_transaction_command=v5s.RecoverOrphanedTransactionCommand(
                    message=messages.outgoing(half), transaction_id=transaction_id)))

        try:
            async for command in request_iterator:
                if not command.HasField("settings"):
                    continue
                try:
                    check_settings(command.settings)  # authorization: Pub on what it publishes, Sub on what it reads
                    reply = v5s.TelemetryCommand(status=OK, settings=self._settings_reply(command.settings))
                except Exception as exc:
                    reply = v5s.TelemetryCommand(status=failure_status(exc, "Telemetry", self.serving))
                accepted = reply.status.code == CODE_OK
                if session is None and self.broker.metrics is not None and accepted:
                    session = self.broker.metrics.session_opened(command.settings, context.invocation_metadata())
                subscription = command.settings.subscription
                if consumer_group is None and accepted and subscription.group.name:
                    consumer_group = group_name(subscription.group)
                    self.broker.consumers.session_opened(consumer_group)
                if not published and accepted and command.settings.HasField("publishing"):
                    published = [topic_name(topic) for topic in command.settings.publishing.topics]
                    self.broker.transactions.producer_opened(published, check)
                outbox.put_nowait(reply)
        finally:
            if session is not None:
                self.broker.metrics.session_closed(session)
            if consumer_group is not None:
                self.broker.consumers.session_closed(consumer_group)
            if published:
                self.broker.transactions.producer_closed(published, check)
            outbox.put_nowait(None)

    def _settings_reply(self, settings: v5.Settings) -> v5.Settings:
        """The group's subscription config (RocketMQ's defaults for one never configured)."""
        group = SubscriptionGroup(_NO_GROUP)
        if settings.HasField("subscription") and settings.subscription.group.name:
            name = group_name(settings.subscription.group)
            self.broker.consumers.touch(name)
            group = self.broker.consumers.group(name)
        return settings_reply(settings, self.broker.config["maxMessageSize"], group)

    @answers(v5s.NotifyClientTerminationResponse)
    async def NotifyClientTermination(self, request, context):
        return v5s.NotifyClientTerminationResponse(status=OK)

    @answers(v5s.QueryAssignmentResponse)
    async def QueryAssignment(self, request, context):
        return assignments(route_response(await self.route_lookup(topic_name(request.topic)), request.topic))

    # Sending.

    @answers(v5s.SendMessageResponse)
    async def SendMessage(self, request, context):
        count = len(request.messages)
        if not 0 < count <= limits.BATCH_MESSAGES_MAX:
            raise QuorumqError(Error.BATCH_TOO_LARGE, f"a request carries 1..{limits.BATCH_MESSAGES_MAX} messages")
        explicit = any(key == EXPLICIT_QUEUE_HEADER and value == "1"
                       for key, value in context.invocation_metadata() or ())
        checked = [self._incoming(message, explicit) for message in request.messages]
        if sum(len(item.body) for item in checked if isinstance(item, MessageIn)) > limits.BATCH_BYTES_MAX:
            raise QuorumqError(Error.BATCH_TOO_LARGE, f"a request carries at most {limits.BATCH_BYTES_MAX} bytes "
                                                      "of bodies")
        results = await self.broker.put(checked, answer_by(context, self.broker.clock))
        response = v5s.SendMessageResponse()
        add_entry = response.entries.add  # adding in place copies less than building a list
        first_failure = None
        for message, result in zip(request.messages, results):
            entry_status = _entry_status(result)
            if first_failure is None and entry_status.code != CODE_OK:
                first_failure = entry_status
            # RocketMQ's broker answers the message's client id as its transaction id, for every
            # type but a transaction's, whose id names its half message (a parked message's offset
            # is in its system topic).
            system = message.system_properties
            message_id = system.message_id
            entry = add_entry(status=entry_status, message_id=message_id, transaction_id=message_id,
                              offset=max(result.queue_offset, 0))
            if result.queue_offset >= 0:
                if system.message_type == TRANSACTION_TYPE:
                    entry.transaction_id = encode_transaction_id(result.queue_offset)
                elif system.HasField("delivery_timestamp"):
                    entry.recall_handle = encode_recall_handle(topic_name(message.topic),
                                                               self.broker.config["brokerName"],
                                                               result.queue_offset, message_id)
        response.status.CopyFrom(first_failure or OK)
        return response

    def _incoming(self, message: v5.Message, explicit_queue: bool) -> MessageIn | QuorumqError:
        try:
            return incoming(message, self.broker.config["maxMessageSize"], explicit_queue)
        except QuorumqError as error:
            return error

    # SimpleConsumer: receive, ack, change invisible duration, dead letters.

    async def ReceiveMessage(self, request, context):
        try:
            answers = await self._receive(request, context)
        except Exception as exc:
            yield v5s.ReceiveMessageResponse(status=failure_status(exc, "ReceiveMessage", self.serving))
            return
        if not answers:
            yield v5s.ReceiveMessageResponse(status=NO_NEW_MESSAGE)
            return
        yield v5s.ReceiveMessageResponse(status=OK)
        for message in answers:
            yield v5s.ReceiveMessageResponse(message=message)
        # RocketMQ's proxy closes each answer with the time it was sent; the official Python
        # PushConsumer measures its receive latency from it and drops the batch without it.
        sent_at = Timestamp()
        sent_at.FromMilliseconds(self.broker.clock.now_ms())
        yield v5s.ReceiveMessageResponse(delivery_timestamp=sent_at)

    async def _receive(self, request, context) -> list[v5.Message]:
        group = group_name(request.group)
        topic = topic_name(request.message_queue.topic)
        tags = messages.tag_filter(request.filter_expression)
        batch = min(max(request.batch_size, 1), limits.RECEIVE_BATCH_MAX)
        invisible_s = (_seconds(request.invisible_duration) if request.HasField("invisible_duration")
                       else limits.INVISIBLE_SECONDS_DEFAULT)
        if not limits.INVISIBLE_SECONDS_MIN <= invisible_s <= limits.INVISIBLE_SECONDS_MAX:
            raise QuorumqError(Error.ILLEGAL_INVISIBLE_TIME, f"invisible duration must lie in "
                               f"{limits.INVISIBLE_SECONDS_MIN:g}..{limits.INVISIBLE_SECONDS_MAX:g} s")
        budget = _poll_budget(request.long_polling_timeout if request.HasField("long_polling_timeout") else None,
                              context)
        deadline = self.broker.clock.monotonic() + budget
        limit = _answer_limit(context)
        consumers = self.broker.consumers
        consumers.touch(group)
        while True:
            settings = consumers.group(group)  # its config, read afresh each time the poll looks
            if not settings.consume_enable:  # the v5 code RocketMQ's proxy gives NO_PERMISSION
                raise QuorumqError(Error.NO_PERMISSION, f"subscription group {group} no permission: its "
                                                        "consumeEnable is false (updateSubGroup -s true allows it)")
            queue_ids = self._queue_ids_or_none(topic)
            if queue_ids:
                self._receive_turn += 1
                turn = self._receive_turn % len(queue_ids)
                # A FIFO group's receive is a lease record, admitted and waited for as a send.
                in_order = consumers.in_order(settings, topic)
                need_ack = self.broker.sends.admit_record() if in_order else 0
                popped = consumers.pop(group, topic, queue_ids[turn:] + queue_ids[:turn], tags, batch,
                                       int(invisible_s * 1000), in_order)
                answers, too_large = self._answers(group, topic, popped.deliveries, limit)
                letters = popped.dead_letters + too_large
                failed = await self._finish_pop(group, topic, letters, popped.record_end, need_ack,
                                                answer_by(context, self.broker.clock))
                delivered = [delivery for delivery in popped.deliveries if delivery.receipt_handle in answers]
                if failed and in_order:
                    delivered = ahead_of([letter for letter, _ in failed], delivered)
                if delivered:
                    self.broker.count_read(topic, group, [delivery.message for delivery in delivered])
                    return [answers[delivery.receipt_handle] for delivery in delivered]
                if len(failed) < len(letters):
                    continue  # read what lies behind those written at once
            left = deadline - self.broker.clock.monotonic()
            if left <= 0:
                return []
            await self.broker.arrivals.wait(topic, min(left, LEASE_RECHECK_S))

    async def _finish_pop(self, group: str, topic: str, letters: list[DeadLetter], record_end: int | None,
                      need_ack: int, by: float | None) -> list[tuple[DeadLetter, QuorumqError]]:
        """What a receive does before it answers: write its dead letters (a FIFO queue hands
        nothing out ahead of one not yet in its DLQ topic) while its lease records' copies are
        awaited. Both end before the answer, also when one fails; the letters that failed."""
        write = self.broker.dead_letters.write(group, topic, letters, by) if letters else None
        record = None if record_end is None else self.broker.sends.await_record(record_end, need_ack, by)
        if write is None:
            if record is not None:
                await record
            return []
        if record is None:
            return await write
        failed, recorded = await asyncio.gather(write, record, return_exceptions=True)
        if isinstance(recorded, BaseException):
            raise recorded
        if isinstance(failed, BaseException):
            raise failed
        return failed

    def _answers(self, group: str, topic: str, deliveries: list[Delivery],
                 limit: int | None) -> tuple[dict[str, v5.Message], list[DeadLetter]]:
        """The v5 message of each of `deliveries` by its receipt handle, except any whose answer is
        above `limit`: the client could never receive it, and it would fail every receive it joined.
        Such a message is a dead letter (logged once, counted in msgSkippedTooLargeTotal): a client
        without the limit reads it from the DLQ topic, and PullMessage can still read it at its offset."""
        answers, too_large = {}, []
        for delivery in deliveries:
            message = messages.outgoing(delivery.message, delivery.attempt)
            message.system_properties.receipt_handle = delivery.receipt_handle
            message.system_properties.invisible_duration.FromMilliseconds(delivery.invisible_ms)
            size = None if limit is None else messages.answer_bytes(message)
            if size is None or size <= limit:
                answers[delivery.receipt_handle] = message
                continue
            too_large.append(DeadLetter(delivery.message, delivery.receipt_handle, delivery.attempt))
            self.broker.stats["msgSkippedTooLargeTotal"] += 1
            stored = delivery.message
            log.warning("group %s dead-letters message %s (%s queue %d offset %d): its receive answer of %d bytes "
                        "is above the %d bytes its client takes", group, message.system_properties.message_id,
                        topic, stored.queue_id, stored.queue_offset, size, limit)
        return answers, too_large

    def _queue_ids_or_none(self, topic: str) -> list[int]:
        """A topic that auto-create will make on first send reads as empty, not as missing."""
        try:
            return self.broker.readable_queue_ids(topic)
        except QuorumqError as exc:
            if exc.error is Error.TOPIC_NOT_FOUND and self.broker.config["autoCreateTopicEnable"]:
                return []
            raise

    @answers(v5s.AckMessageResponse)
    async def AckMessage(self, request, context):
        group = group_name(request.group)
        topic = topic_name(request.topic)
        entries = []
        first_failure = None
        for entry in request.entries:
            try:
                if self.broker.consumers.ack(group, topic, entry.receipt_handle):
                    self.broker.arrivals.notify(topic)  # a FIFO queue's batch is done: it hands out again
                entry_status = OK
            except QuorumqError as exc:
                entry_status = error_status(exc)
                first_failure = first_failure or entry_status
            entries.append(v5s.AckMessageResultEntry(message_id=entry.message_id,
                                                      receipt_handle=entry.receipt_handle, status=entry_status))
        return v5s.AckMessageResponse(status=first_failure or OK, entries=entries)

    @answers(v5s.ChangeInvisibleDurationResponse)
    async def ChangeInvisibleDuration(self, request, context):
        group = group_name(request.group)
        topic = topic_name(request.topic)
        seconds = _seconds(request.invisible_duration)
        if not 0 <= seconds <= limits.INVISIBLE_SECONDS_MAX:
            raise QuorumqError(Error.ILLEGAL_INVISIBLE_TIME,
                               f"invisible duration must lie in 0..{limits.INVISIBLE_SECONDS_MAX:g} s")
        consumers = self.broker.consumers
        # A FIFO queue's change is a lease record, admitted and waited for as a send.
        in_order = consumers.in_order(consumers.group(group), topic)
        need_ack = self.broker.sends.admit_record() if in_order else 0
        handle, record_end = consumers.change_invisible(group, topic, request.receipt_handle, int(seconds * 1000),
                                                        in_order)
        if record_end is not None:
            await self.broker.sends.await_record(record_end, need_ack, answer_by(context, self.broker.clock))
        return v5s.ChangeInvisibleDurationResponse(status=OK, receipt_handle=handle)

    @answers(v5s.ForwardMessageToDeadLetterQueueResponse)
    async def ForwardMessageToDeadLetterQueue(self, request, context):
        """A consumer gives up on a message it holds (the official FIFO PushConsumer does after its
        last local attempt): it is copied to the group's DLQ topic at once, then dropped. The
        request's attempt counts are not used, as RocketMQ's proxy does not use them."""
        group = group_name(request.group)
        topic = topic_name(request.topic)
        consumers = self.broker.consumers
        in_order = consumers.in_order(consumers.group(group), topic)
        if in_order:  # the hold is a lease record, admitted as a send (the copy's wait then holds it too)
            self.broker.sends.admit_record()
        letter = consumers.dead_letter(group, topic, request.receipt_handle, in_order)
        failed = await self.broker.dead_letters.write(group, topic, [letter], answer_by(context, self.broker.clock))
        if failed:
            raise failed[0][1]
        return v5s.ForwardMessageToDeadLetterQueueResponse(status=OK)

    # Offset-addressed reads.

    async def PullMessage(self, request, context):
        try:
            result = await self._pull(request, context)
        except Exception as exc:
            yield v5s.PullMessageResponse(status=failure_status(exc, "PullMessage", self.serving))
            return
        if result.status is GetStatus.OFFSET_OVERFLOW_BADLY:
            yield v5s.PullMessageResponse(status=status(Error.ILLEGAL_OFFSET,
                                                        f"offset is beyond the queue's max {result.max_offset}"))
        elif result.messages:
            yield v5s.PullMessageResponse(status=OK)
            for stored in result.messages:
                yield v5s.PullMessageResponse(message=messages.outgoing(stored))
        else:
            yield v5s.PullMessageResponse(status=NO_NEW_MESSAGE)
        yield v5s.PullMessageResponse(next_offset=result.next_offset)

    async def _pull(self, request, context):
        return await self.broker.pull(
            topic_name(request.message_queue.topic), request.message_queue.id, request.offset,
            min(max(request.batch_size, 1), limits.PULL_BATCH_MAX), messages.tag_filter(request.filter_expression),
            _poll_budget(request.long_polling_timeout if request.HasField("long_polling_timeout") else None,
                         context), group=group_name(request.group))

    @answers(v5s.GetOffsetResponse)
    async def GetOffset(self, request, context):
        group = group_name(request.group)
        topic = topic_name(request.message_queue.topic)
        self.broker.check_queue(topic, request.message_queue.id)
        offset = self.broker.consumers.committed(group, topic, request.message_queue.id)
        if offset is None:
            return v5s.GetOffsetResponse(status=v5.Status(
                code=v5.Code.OFFSET_NOT_FOUND, message=f"OFFSET_NOT_FOUND: group {group} has no offset here"))
        return v5s.GetOffsetResponse(status=OK, offset=offset)

    @answers(v5s.UpdateOffsetResponse)
    async def UpdateOffset(self, request, context):
        group = group_name(request.group)
        topic = topic_name(request.message_queue.topic)
        queue_id = request.message_queue.id
        self.broker.check_queue(topic, queue_id)
        if not 0 <= request.offset <= self.broker.store.queue_max_offset(topic, queue_id):
            raise QuorumqError(Error.ILLEGAL_OFFSET, f"offset {request.offset} is beyond the queue's end")
        await self.broker.commit_offset(group, topic, queue_id, request.offset)
        return v5s.UpdateOffsetResponse(status=OK)

    @answers(v5s.QueryOffsetResponse)
    async def QueryOffset(self, request, context):
        topic = topic_name(request.message_queue.topic)
        queue_id = request.message_queue.id
        self.broker.check_queue(topic, queue_id)
        store = self.broker.store
        policy = request.query_offset_policy
        if policy == v5.QueryOffsetPolicy.BEGINNING:
            offset = store.queue_min_offset(topic, queue_id)
        elif policy == v5.QueryOffsetPolicy.END:
            offset = store.queue_max_offset(topic, queue_id)
        else:
            try:
                timestamp_ms = request.timestamp.ToMilliseconds()
            except ValueError as error:  # seconds outside years 1..9999, or nanos outside 0..999,999,999
                raise QuorumqError(Error.BAD_REQUEST, f"QueryOffset: {error}") from None
            offset = store.offset_for_timestamp(topic, queue_id, timestamp_ms)
        return v5s.QueryOffsetResponse(status=OK, offset=offset)

    # Transactions and delay messages.

    @answers(v5s.EndTransactionResponse)
    async def EndTransaction(self, request, context):
        await self.broker.transactions.end(topic_name(request.topic), request.message_id, request.transaction_id,
                                           _DECISIONS.get(request.resolution),
                                           answer_by(context, self.broker.clock))
        return v5s.EndTransactionResponse(status=OK)

    @answers(v5s.RecallMessageResponse)
    async def RecallMessage(self, request, context):
        message_id = await self.broker.timers.recall(topic_name(request.topic), request.recall_handle,
                                                     answer_by(context, self.broker.clock))
        return v5s.RecallMessageResponse(status=OK, message_id=message_id)
