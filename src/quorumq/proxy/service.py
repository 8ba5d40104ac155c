"""The proxy's RocketMQ v5 MessagingService: a stateless front for the brokers of a cluster, as
RocketMQ 5's proxy in cluster mode.

Routes come from the name server with every endpoint the proxy's own address, so the official
client talks to proxies alone; settings, heartbeats and terminations are answered here. Every call
on a queue goes to the broker group that owns it: a receive, an offset call or a pull names its
queue's group; an ack, a change of invisible duration, a dead-lettering or a transaction's end
carries a handle the proxy prefixed with the group's name (core/proxy_handles.py); a send goes to
the group the proxy picks. A call tries the group's addresses master first: in controller mode a
replica forwards to the master the controller named (endpoint/forwarding.py), so a proxy reaches a
new master without waiting for the name server.
"""

import asyncio
import itertools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

import grpc
from rocketmq.grpc_protocol import definition_pb2 as v5
from rocketmq.grpc_protocol import service_pb2 as v5s

from quorumq import limits
from quorumq.client.errors import ClientError
from quorumq.client.routes import REQUEST_TIMEOUT_S, Channels, Routes
from quorumq.cluster import cluster_pb2 as pb
from quorumq.cluster import cluster_pb2_grpc as pb_grpc
from quorumq.core.auth import parse_authorization
from quorumq.core.proxy_handles import send_broker, unwrap, wrap
from quorumq.core.subscription import SubscriptionGroup
from quorumq.core.timers import decode_recall_handle
from quorumq.errors import Error, QuorumqError
from quorumq.protocol.configs import group_from_pb
from quorumq.protocol.constants import EXPLICIT_QUEUE_HEADER
from quorumq.protocol.v5 import (
    OK,
    UnservedMessagingService,
    answers,
    assignments,
    failure_status,
    forwarded_metadata,
    group_name,
    proxied_route,
    send_answer,
    settings_reply,
    topic_name,
)
from quorumq.proxy import records, telemetry
from quorumq.proxy.sends import LineKey, SendLines

log = logging.getLogger("quorumq.proxy")

CODE_OK = v5.Code.OK
T = TypeVar("T")
_WRITABLE = frozenset({v5.Permission.WRITE, v5.Permission.READ_WRITE})


def _failed(broker_name: str, code: grpc.StatusCode, details: str | None) -> QuorumqError:
    """A call the broker failed at the gRPC level (a deadline passed, say): the broker answers
    its own refusals in v5 statuses, which go back as they are."""
    return QuorumqError(Error.BROKER_UNREACHABLE, f"broker group {broker_name}: {code.name} {details}")


class _Unreachable(Exception):
    """An address of a group did not answer; the call goes on to the next (_first_reachable)."""

    def __init__(self, detail: str | None) -> None:
        super().__init__(detail)
        self.detail = detail


def _signed(header: str) -> bool:
    """Whether a call's authorization header names a user: the official clients send one without
    credentials too, with no access key."""
    try:
        parse_authorization(header)
    except QuorumqError:
        return False
    return True


class ProxyMessagingService(UnservedMessagingService):
    serving = "the proxy"

    def __init__(self, address: str, routes: Routes, channels: Channels, max_body_bytes: int,
                 send_records: bool, batch_delay_s: float) -> None:
        """`send_records`: sends go to the brokers as records (SendBatch), unsigned; False when the
        proxy signs its own calls (authentication is on): a SendBatch it signed would pass for the
        client's, whose signature and rules the broker must check (docs/proxy.md)."""
        self.address = address  # what clients reach this proxy at, in every route it answers
        self.routes = routes
        self.channels = channels
        self.max_body_bytes = max_body_bytes
        self.send_records = send_records
        self._brokers: dict[str, list[str]] = {}  # broker group -> its v5 addresses, master first
        self._learnt: dict[str, v5s.QueryRouteResponse] = {}  # topic -> the route _brokers was read from
        self._send_turn = itertools.count()  # the broker group of a send
        self._queue_turn = itertools.count()  # the queue of a merged send's records
        self._sends = SendLines(self._send_merged, batch_delay_s)

    # Routes and the broker groups behind them.

    async def _route(self, topic: v5.Resource) -> v5s.QueryRouteResponse:
        name = topic_name(topic)
        response = await self.routes.route(name)
        if self._learnt.get(name) is not response:  # a route read afresh: its addresses may be new
            addresses: dict[str, list[str]] = {}
            for queue in response.message_queues:
                where = addresses.setdefault(queue.broker.name, [])
                for address in queue.broker.endpoints.addresses:
                    if f"{address.host}:{address.port}" not in where:
                        where.append(f"{address.host}:{address.port}")
            self._brokers.update(addresses)
            self._learnt[name] = response
        return response

    async def _addresses(self, broker_name: str, topic: v5.Resource) -> list[str]:
        if broker_name not in self._brokers:
            await self._route(topic)
        addresses = self._brokers.get(broker_name)
        if not addresses:
            raise QuorumqError(Error.BROKER_NOT_FOUND, f"no broker group {broker_name} serves topic {topic.name}")
        return addresses

    def _unreachable(self, broker_name: str, topic: v5.Resource, detail: str | None) -> QuorumqError:
        """No address of the group answered: the next call reads the route afresh."""
        self.routes.forget(topic_name(topic))
        self._brokers.pop(broker_name, None)
        return QuorumqError(Error.BROKER_UNREACHABLE, f"broker group {broker_name}: {detail or 'no address'}")

    async def _unary(self, method: str, broker_name: str, topic: v5.Resource, request, context):
        return await self._call(method, broker_name, topic, request, forwarded_metadata(context),
                                context.time_remaining())

    async def _call(self, method: str, broker_name: str, topic: v5.Resource, request, metadata: tuple,
                    timeout_s: float | None, admin: bool = False):
        """`method` of the group's v5 service (its admin service: the proxy's own call), with the
        client's headers (its signature the broker checks). Any failure but an unreachable address
        is the client's, as the broker gave it."""
        async def attempt(address: str):
            stub = (pb_grpc.BrokerAdminStub(self.channels.channel(address)) if admin
                    else self.channels.messaging(address))
            try:
                return await getattr(stub, method)(request, timeout=timeout_s, metadata=metadata)
            except grpc.aio.AioRpcError as exc:
                if exc.code() is not grpc.StatusCode.UNAVAILABLE:
                    raise _failed(broker_name, exc.code(), exc.details()) from None
                raise _Unreachable(exc.details()) from None

        return await self._first_reachable(broker_name, topic, attempt)

    async def _first_reachable(self, broker_name: str, topic: v5.Resource,
                               attempt: Callable[[str], Awaitable[T]]) -> T:
        """`attempt` on the group's addresses, master first, until one does not raise _Unreachable."""
        failure: str | None = None
        for address in await self._addresses(broker_name, topic):
            try:
                return await attempt(address)
            except _Unreachable as exc:
                failure = exc.detail
        raise self._unreachable(broker_name, topic, failure)

    async def _stream(self, method: str, broker_name: str, topic: v5.Resource, request, context) -> AsyncIterator:
        """As _unary for a server stream; once part of the answer went to the client, a failure
        ends the call (a second answer from elsewhere could repeat or skip messages)."""
        failure: str | None = None
        for address in await self._addresses(broker_name, topic):
            answered = False
            try:
                async for response in getattr(self.channels.messaging(address), method)(
                        request, timeout=context.time_remaining(), metadata=forwarded_metadata(context)):
                    answered = True
                    yield response
                return
            except grpc.aio.AioRpcError as exc:
                if answered:
                    raise  # the client's call fails, as the broker's did
                if exc.code() is not grpc.StatusCode.UNAVAILABLE:
                    raise _failed(broker_name, exc.code(), exc.details()) from None
                failure = exc.details()
        raise self._unreachable(broker_name, topic, failure)

    @answers(v5s.QueryRouteResponse)
    async def QueryRoute(self, request, context):
        return proxied_route(await self._route(request.topic), request.topic, self.address)

    @answers(v5s.QueryAssignmentResponse)
    async def QueryAssignment(self, request, context):
        return assignments(proxied_route(await self._route(request.topic), request.topic, self.address))

    # Client sessions, answered here.

    @answers(v5s.HeartbeatResponse)
    async def Heartbeat(self, request, context):
        return v5s.HeartbeatResponse(status=OK)

    @answers(v5s.NotifyClientTerminationResponse)
    async def NotifyClientTermination(self, request, context):
        return v5s.NotifyClientTerminationResponse(status=OK)

    async def Telemetry(self, request_iterator, context):
        """Each settings command answered here; a producer's transaction checks come from the
        brokers of its topics (proxy/telemetry.py)."""
        async for command in telemetry.serve(request_iterator, forwarded_metadata(context), self._settings,
                                             self._replicas, self.channels):
            yield command

    async def _settings(self, settings: v5.Settings) -> v5s.TelemetryCommand:
        """The proxy's values and, for a consumer, its group's config as a broker holds it."""
        try:
            group = await self._group(settings.subscription)
            return v5s.TelemetryCommand(status=OK, settings=settings_reply(settings, self.max_body_bytes, group))
        except Exception as exc:
            return v5s.TelemetryCommand(status=failure_status(exc, "Telemetry", self.serving))

    async def _replicas(self, topics) -> dict[str, str]:
        """Every replica of the broker groups serving any of `topics`: its address -> its group."""
        found: dict[str, str] = {}
        for topic in topics:
            for broker_name in {queue.broker.name for queue in (await self._route(topic)).message_queues}:
                found.update(dict.fromkeys(self._brokers.get(broker_name, ()), broker_name))
        return found

    async def _group(self, subscription: v5.Subscription) -> SubscriptionGroup:
        """The group's subscription config from a broker group of its first topic (updateSubGroup
        sets it on every master); RocketMQ's defaults for settings that name no group or topic."""
        if not subscription.group.name or not subscription.subscriptions:
            return SubscriptionGroup("-")
        name = group_name(subscription.group)
        topic = subscription.subscriptions[0].topic
        route = await self._route(topic)
        if route.status.code != CODE_OK or not route.message_queues:  # a topic not made yet
            return SubscriptionGroup(name)
        config = await self._call("GetSubscriptionGroup", route.message_queues[0].broker.name, topic,
                                  pb.GroupRequest(group=name), self.channels.metadata, REQUEST_TIMEOUT_S, admin=True)
        return group_from_pb(config)

    # Sending.

    @answers(v5s.SendMessageResponse)
    async def SendMessage(self, request, context):
        if not request.messages:
            raise QuorumqError(Error.BATCH_TOO_LARGE, "a request carries at least one message")
        first = request.messages[0]
        route = await self._route(first.topic)
        if route.status.code != CODE_OK:  # no route yet; RocketMQ's proxy answers so too
            return v5s.SendMessageResponse(status=route.status)
        writable = sorted({queue.broker.name for queue in route.message_queues if queue.permission in _WRITABLE})
        if not writable:
            raise QuorumqError(Error.NO_PERMISSION, f"topic {first.topic.name} has no writable queue")
        system = first.system_properties
        broker_name = send_broker(writable, system.message_group if system.HasField("message_group") else None,
                                  next(self._send_turn))
        metadata = forwarded_metadata(context)
        headers = dict(metadata)
        if headers.get(EXPLICIT_QUEUE_HEADER) == "1":  # its queue ids are its own: not merged
            response = await self._call("SendMessage", broker_name, first.topic, request, metadata,
                                        context.time_remaining())
        else:
            signer = headers.get("authorization", "")
            if self.send_records and not _signed(signer):
                signer = ""  # sent as records
            key = (broker_name, topic_name(first.topic), signer)
            response = await self._sends.send(key, request, metadata, context.time_remaining())
        for message, entry in zip(request.messages, response.entries):
            if message.system_properties.message_type == v5.MessageType.TRANSACTION and entry.status.code == CODE_OK:
                entry.transaction_id = wrap(broker_name, entry.transaction_id)
        return response

    async def _send_merged(self, key: LineKey, request: v5s.SendMessageRequest, metadata: tuple,
                           timeout_s: float | None) -> v5s.SendMessageResponse:
        """A merged line's send (proxy/sends.py): as records for a line of unsigned calls when the
        proxy signs nothing itself and the request is within the bounds of one, else the v5
        SendMessage as it is (docs/proxy.md says why)."""
        broker_name, line_topic, signer = key
        topic = request.messages[0].topic
        if (signer or not self.send_records or len(request.messages) > limits.BATCH_MESSAGES_MAX
                or sum(len(message.body) for message in request.messages) > limits.BATCH_BYTES_MAX):
            return await self._call("SendMessage", broker_name, topic, request, metadata, timeout_s)
        route = await self._route(topic)
        queue_count = records.write_queues(route.message_queues, broker_name)
        if not queue_count:
            return await self._call("SendMessage", broker_name, topic, request, metadata, timeout_s)
        plan = records.plan(request.messages, line_topic, self.max_body_bytes, queue_count, next(self._queue_turn))
        entries = plan.entries
        queues = list(plan.queues.items())
        answers = await asyncio.gather(*(self._send_batch(
            broker_name, topic, records.batch_request(line_topic, queue_id, queued), timeout_s)
            for queue_id, queued in queues))
        v5_indexes = plan.v5_indexes
        for (_, queued), answer in zip(queues, answers):
            if answer is None:  # refused whole, nothing stored: the broker's v5 answer says which failed
                v5_indexes += [record.index for record in queued]
            else:
                for index, entry in records.stored_entries(answer, queued, request.messages):
                    entries[index] = entry
        if v5_indexes:
            v5_indexes.sort()
            part = v5s.SendMessageRequest(messages=[request.messages[index] for index in v5_indexes])
            response = await self._call("SendMessage", broker_name, topic, part, metadata, timeout_s)
            whole = len(response.entries) != len(v5_indexes)  # refused as a whole: only a status
            for position, index in enumerate(v5_indexes):
                entries[index] = (records.failed_entry(request.messages[index], response.status) if whole
                                  else response.entries[position])
        return send_answer(entries)

    async def _send_batch(self, broker_name: str, topic: v5.Resource, request: bytes,
                          timeout_s: float | None) -> pb.SendBatchResponse | None:
        """SendBatch on the group, as `_call`; None when the broker refused it (it stores such a
        request's records all or none, so none)."""
        async def attempt(address: str) -> pb.SendBatchResponse | None:
            try:
                return await self.channels.send_batch(address, request,
                                                      REQUEST_TIMEOUT_S if timeout_s is None else timeout_s)
            except ClientError as exc:
                if exc.error is not None:
                    return None
                if exc.grpc_status is not grpc.StatusCode.UNAVAILABLE:
                    raise _failed(broker_name, exc.grpc_status or grpc.StatusCode.UNKNOWN, exc.detail) from None
                raise _Unreachable(exc.detail) from None

        return await self._first_reachable(broker_name, topic, attempt)

    @answers(v5s.EndTransactionResponse)
    async def EndTransaction(self, request, context):
        broker_name, transaction_id = unwrap(request.transaction_id, Error.INVALID_TRANSACTION_ID)
        request.transaction_id = transaction_id
        return await self._unary("EndTransaction", broker_name, request.topic, request, context)

    @answers(v5s.RecallMessageResponse)
    async def RecallMessage(self, request, context):
        _, broker_name, _, _ = decode_recall_handle(request.recall_handle)
        return await self._unary("RecallMessage", broker_name, request.topic, request, context)

    # SimpleConsumer: receive, ack, change invisible duration, dead letters.

    async def ReceiveMessage(self, request, context):
        broker_name = request.message_queue.broker.name
        try:
            async for response in self._stream("ReceiveMessage", broker_name, request.message_queue.topic,
                                               request, context):
                if response.HasField("message"):
                    system = response.message.system_properties
                    system.receipt_handle = wrap(broker_name, system.receipt_handle)
                yield response
        except QuorumqError as exc:
            yield v5s.ReceiveMessageResponse(status=failure_status(exc, "ReceiveMessage", self.serving))

    @answers(v5s.AckMessageResponse)
    async def AckMessage(self, request, context):
        """Each group's entries acked on it; the answer's entries carry the client's handles."""
        parts: dict[str, v5s.AckMessageRequest] = {}
        for entry in request.entries:
            broker_name, handle = unwrap(entry.receipt_handle)
            part = parts.get(broker_name)
            if part is None:
                part = parts[broker_name] = v5s.AckMessageRequest(group=request.group, topic=request.topic)
            part.entries.add(message_id=entry.message_id, receipt_handle=handle)
        answer = v5s.AckMessageResponse(status=OK)
        for broker_name, part in parts.items():
            response = await self._unary("AckMessage", broker_name, request.topic, part, context)
            if response.status.code != CODE_OK and answer.status.code == CODE_OK:
                answer.status.CopyFrom(response.status)
            for entry in response.entries:
                entry.receipt_handle = wrap(broker_name, entry.receipt_handle)
            answer.entries.extend(response.entries)
        return answer

    @answers(v5s.ChangeInvisibleDurationResponse)
    async def ChangeInvisibleDuration(self, request, context):
        broker_name, request.receipt_handle = unwrap(request.receipt_handle)
        response = await self._unary("ChangeInvisibleDuration", broker_name, request.topic, request, context)
        if response.receipt_handle:
            response.receipt_handle = wrap(broker_name, response.receipt_handle)
        return response

    @answers(v5s.ForwardMessageToDeadLetterQueueResponse)
    async def ForwardMessageToDeadLetterQueue(self, request, context):
        broker_name, request.receipt_handle = unwrap(request.receipt_handle)
        return await self._unary("ForwardMessageToDeadLetterQueue", broker_name, request.topic, request, context)

    # Offset-addressed reads and offsets: the queue names its group.

    async def PullMessage(self, request, context):
        queue = request.message_queue
        try:
            async for response in self._stream("PullMessage", queue.broker.name, queue.topic, request, context):
                yield response
        except QuorumqError as exc:
            yield v5s.PullMessageResponse(status=failure_status(exc, "PullMessage", self.serving))

    @answers(v5s.GetOffsetResponse)
    async def GetOffset(self, request, context):
        queue = request.message_queue
        return await self._unary("GetOffset", queue.broker.name, queue.topic, request, context)

    @answers(v5s.UpdateOffsetResponse)
    async def UpdateOffset(self, request, context):
        queue = request.message_queue
        return await self._unary("UpdateOffset", queue.broker.name, queue.topic, request, context)

    @answers(v5s.QueryOffsetResponse)
    async def QueryOffset(self, request, context):
        queue = request.message_queue
        return await self._unary("QueryOffset", queue.broker.name, queue.topic, request, context)
