"""The pull consumer: offset-addressed reads of one queue, and a consumer group's committed offsets."""

from dataclasses import dataclass
from typing import Any, Awaitable, Callable, TypeVar

import grpc
from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp
from rocketmq.grpc_protocol import definition_pb2 as v5
from rocketmq.grpc_protocol import service_pb2 as rpc

from quorumq import limits
from quorumq.client.errors import ClientError, check
from quorumq.client.routes import REQUEST_TIMEOUT_S, Channels, RouteQueue, Routes, call

# Pull statuses, by RocketMQ's PullStatus names.
FOUND = "FOUND"
NO_NEW_MSG = "NO_NEW_MSG"
OFFSET_ILLEGAL = "OFFSET_ILLEGAL"
_PULL_STATUS = {
    v5.Code.OK: FOUND,
    v5.Code.MESSAGE_NOT_FOUND: NO_NEW_MSG,
    v5.Code.ILLEGAL_OFFSET: OFFSET_ILLEGAL,
}

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ReceivedMessage:
    topic: str
    queue_id: int
    queue_offset: int
    message_id: str
    body: bytes
    tag: str
    keys: tuple[str, ...]
    properties: dict[str, str]
    born_timestamp_ms: int
    store_timestamp_ms: int
    born_host: str
    store_host: str
    broker_name: str


@dataclass(frozen=True, slots=True)
class PullResult:
    status: str  # FOUND, NO_NEW_MSG or OFFSET_ILLEGAL
    messages: list[ReceivedMessage]
    next_offset: int


def _received(message: v5.Message, broker_name: str) -> ReceivedMessage:
    properties = message.system_properties
    return ReceivedMessage(
        topic=message.topic.name, queue_id=properties.queue_id, queue_offset=properties.queue_offset,
        message_id=properties.message_id, body=message.body, tag=properties.tag,
        keys=tuple(properties.keys), properties=dict(message.user_properties),
        born_timestamp_ms=properties.born_timestamp.ToMilliseconds(),
        store_timestamp_ms=properties.store_timestamp.ToMilliseconds(),
        born_host=properties.born_host, store_host=properties.store_host, broker_name=broker_name)


class PullConsumer:
    """Reads queues by offset for one consumer group; use `async with PullConsumer(...) as consumer`.

    A queue is named by topic and id; with several brokers, `broker_name` picks the broker (else the
    first broker by name that has the queue).
    """

    def __init__(self, access_point: str, group: str, *, timeout_s: float = REQUEST_TIMEOUT_S) -> None:
        self._channels = Channels()
        self._routes = Routes(access_point, self._channels, timeout_s)
        self._group = v5.Resource(name=group)
        self._timeout_s = timeout_s

    async def __aenter__(self) -> "PullConsumer":
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._channels.close()

    async def queues(self, topic: str) -> list[RouteQueue]:
        """The readable queues of a topic, ordered by broker name and queue id."""
        return [queue for queue in await self._routes.queues(topic) if queue.readable]

    async def pull(self, topic: str, queue_id: int, offset: int, max_count: int = 32,
                   long_poll_s: float = 0, *, broker_name: str | None = None,
                   tag_expression: str = "*") -> PullResult:
        """Messages from `offset` on (from the queue's min offset if it lies below it).

        With long_poll_s the broker holds the request until a message arrives or the time is up.
        """
        request = rpc.PullMessageRequest(
            group=self._group, offset=offset, batch_size=min(max_count, limits.PULL_BATCH_MAX),
            filter_expression=v5.FilterExpression(type=v5.FilterType.TAG, expression=tag_expression))
        if long_poll_s:
            request.long_polling_timeout.CopyFrom(_duration(long_poll_s))

        async def pull_from(queue: RouteQueue) -> PullResult:
            request.message_queue.CopyFrom(queue.to_proto())
            return await self._read_pull(queue, request, long_poll_s + self._timeout_s)

        return await self._on_queue(topic, queue_id, broker_name, pull_from)

    async def query_offset(self, topic: str, queue_id: int, where: str | int, *,
                           broker_name: str | None = None) -> int:
        """The offset at "BEGINNING" (min), "END" (max) or of the first message stored at or after a
        timestamp in milliseconds."""
        request = rpc.QueryOffsetRequest()
        if where == "BEGINNING":
            request.query_offset_policy = v5.QueryOffsetPolicy.BEGINNING
        elif where == "END":
            request.query_offset_policy = v5.QueryOffsetPolicy.END
        elif isinstance(where, int):
            request.query_offset_policy = v5.QueryOffsetPolicy.TIMESTAMP
            request.timestamp.CopyFrom(_timestamp(where))
        else:
            raise ValueError(f"where is BEGINNING, END or a timestamp in ms, not {where!r}")

        async def query(queue: RouteQueue) -> int:
            request.message_queue.CopyFrom(queue.to_proto())
            response = await self._unary(queue, "QueryOffset", request)
            return response.offset

        return await self._on_queue(topic, queue_id, broker_name, query)

    async def get_offset(self, topic: str, queue_id: int, *, broker_name: str | None = None) -> int | None:
        """The group's committed offset, None when it has none for this queue."""

        async def get(queue: RouteQueue) -> int | None:
            request = rpc.GetOffsetRequest(group=self._group, message_queue=queue.to_proto())
            response = await self._unary(queue, "GetOffset", request, v5.Code.OFFSET_NOT_FOUND)
            return None if response.status.code == v5.Code.OFFSET_NOT_FOUND else response.offset

        return await self._on_queue(topic, queue_id, broker_name, get)

    async def commit_offset(self, topic: str, queue_id: int, offset: int, *,
                            broker_name: str | None = None) -> None:
        async def commit(queue: RouteQueue) -> None:
            request = rpc.UpdateOffsetRequest(group=self._group, message_queue=queue.to_proto(), offset=offset)
            await self._unary(queue, "UpdateOffset", request)

        await self._on_queue(topic, queue_id, broker_name, commit)

    async def _on_queue(self, topic: str, queue_id: int, broker_name: str | None,
                        action: Callable[[RouteQueue], Awaitable[T]]) -> T:
        """Run `action` against the queue's broker; a broker that does not answer gets one more try
        after a fresh route (it may have failed over)."""
        try:
            return await action(await self._routes.find(topic, queue_id, broker_name))
        except ClientError as error:
            if not error.unreachable:
                raise
        self._routes.forget(topic)
        return await action(await self._routes.find(topic, queue_id, broker_name))

    async def _unary(self, queue: RouteQueue, method: str, request: Any, *accepted: int) -> Any:
        stub = self._channels.messaging(queue.address)
        response = await call(getattr(stub, method), request, self._timeout_s, self._channels.metadata)
        check(response.status, *accepted)
        return response

    async def _read_pull(self, queue: RouteQueue, request: rpc.PullMessageRequest,
                         timeout_s: float) -> PullResult:
        status: v5.Status | None = None
        messages: list[ReceivedMessage] = []
        next_offset: int | None = None
        stream = self._channels.messaging(queue.address).PullMessage(
            request, timeout=timeout_s, metadata=self._channels.metadata)
        try:
            async for response in stream:
                content = response.WhichOneof("content")
                if content == "message":
                    messages.append(_received(response.message, queue.broker_name))
                elif content == "status":
                    status = response.status
                elif content == "next_offset":
                    next_offset = response.next_offset
        except grpc.RpcError as error:
            raise ClientError.from_rpc(error) from None
        if status is not None and status.code not in _PULL_STATUS:
            raise ClientError.from_status(status)  # an error answer need not carry a next offset
        if status is None or next_offset is None:
            raise ClientError("INTERNAL_ERROR", "a pull answer lacks its status or next offset")
        return PullResult(_PULL_STATUS[status.code], messages, next_offset)


def _duration(seconds: float) -> Duration:
    duration = Duration()
    duration.FromNanoseconds(int(seconds * 1e9))
    return duration


def _timestamp(milliseconds: int) -> Timestamp:
    timestamp = Timestamp()
    timestamp.FromMilliseconds(milliseconds)
    return timestamp
