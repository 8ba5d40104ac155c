"""The pull consumer: offset-addressed reads of one queue, and a consumer group's committed offsets."""

from dataclasses import dataclass
from typing import Any, Awaitable, Callable, TypeVar

from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp
from rocketmq.grpc_protocol import definition_pb2 as v5
from rocketmq.grpc_protocol import service_pb2 as rpc

from quorumq import limits
from quorumq.client.errors import ClientError, check
from quorumq.client.routes import REQUEST_TIMEOUT_S, Channels, RouteQueue, Routes, call
from quorumq.cluster import cluster_pb2 as pb
from quorumq.core import codec
from quorumq.core import properties as message_properties
from quorumq.core.auth import Credentials

# Pull statuses, by RocketMQ's PullStatus names.
FOUND = pb.PullStatus.Name(pb.FOUND)
NO_NEW_MSG = pb.PullStatus.Name(pb.NO_NEW_MSG)
OFFSET_ILLEGAL = pb.PullStatus.Name(pb.OFFSET_ILLEGAL)

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
    message_group: str | None  # a FIFO message's group (__SHARDINGKEY), not among `properties`


@dataclass(frozen=True, slots=True)
class PullResult:
    status: str  # FOUND, NO_NEW_MSG or OFFSET_ILLEGAL
    messages: list[ReceivedMessage]
    next_offset: int


@dataclass(frozen=True, slots=True)
class PulledRecords:
    """A pull's whole records, not decoded: for copying them on (the replicator)."""
    status: str  # FOUND, NO_NEW_MSG or OFFSET_ILLEGAL
    records: bytes  # commit-log records back to back (core/codec.py), each checked against its CRC
    starts: list[int]  # where each record starts in `records`, then where the last one ends
    next_offset: int


def _tags(expression: str) -> frozenset[str] | None:
    """The tags a TAG expression selects (None: all); the broker filters by hash, this by name."""
    tags = frozenset(part.strip() for part in expression.split("||") if part.strip())
    return None if not tags or "*" in tags else tags


def _record_starts(records: bytes) -> list[int]:
    """Where each of whole commit-log records back to back starts, then where the last ends, each
    checked against its CRC."""
    view = memoryview(records)
    starts = [0]
    while starts[-1] < len(view):
        frame, size = codec.check_detached(view, starts[-1])
        if frame is not codec.Frame.MESSAGE:
            raise ClientError("MESSAGE_CORRUPTED", f"a pulled record fails its check ({frame.name})")
        starts.append(starts[-1] + size)
    return starts


def decode_records(records: bytes, broker_name: str, store_host: str) -> list[ReceivedMessage]:
    """Whole commit-log records back to back, each checked against its CRC before it is decoded;
    `store_host` is the address of the broker that answered (records do not carry it)."""
    messages = []
    for position in _record_starts(records)[:-1]:
        stored = codec.decode_message(records, position, store_host)
        properties = stored.properties
        messages.append(ReceivedMessage(
            topic=stored.topic, queue_id=stored.queue_id, queue_offset=stored.queue_offset,
            message_id=properties.get(message_properties.MESSAGE_ID, ""), body=stored.body,
            tag=properties.get(message_properties.TAGS, ""),
            keys=tuple(properties[message_properties.KEYS].split(" ")) if message_properties.KEYS in properties else (),
            properties={key: value for key, value in properties.items() if key not in message_properties.HIDDEN},
            born_timestamp_ms=stored.born_timestamp_ms, store_timestamp_ms=stored.store_timestamp_ms,
            born_host=stored.born_host, store_host=stored.store_host, broker_name=broker_name,
            message_group=properties.get(message_properties.MESSAGE_GROUP)))
    return messages


class PullConsumer:
    """Reads queues by offset for one consumer group; use `async with PullConsumer(...) as consumer`.

    A queue is named by topic and id; with several brokers, `broker_name` picks the broker (else the
    first broker by name that has the queue).
    """

    def __init__(self, access_point: str, group: str, *, timeout_s: float = REQUEST_TIMEOUT_S,
                 credentials: Credentials | None = None) -> None:
        self._channels = Channels(credentials)  # signs every call
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
        Many messages come back in one answer, as whole records whose CRC is checked here.
        """
        request = pb.PullBatchRequest(group=self._group.name, topic=topic, queue_id=queue_id, offset=offset,
                                      max_count=min(max_count, limits.PULL_BATCH_MAX),
                                      tag_expression=tag_expression, long_poll_ms=int(long_poll_s * 1000))
        tags = _tags(tag_expression)

        async def pull_from(queue: RouteQueue) -> PullResult:
            stub = self._channels.reader(queue.address)
            response = await call(stub.PullBatch, request, long_poll_s + self._timeout_s, self._channels.metadata)
            messages = [message for message in decode_records(response.records, queue.broker_name, queue.address)
                        if tags is None or message.tag in tags]
            return PullResult(pb.PullStatus.Name(response.status), messages, response.next_offset)

        return await self._on_queue(topic, queue_id, broker_name, pull_from)

    async def pull_records(self, topic: str, queue_id: int, offset: int, max_count: int = 32, *,
                           broker_name: str | None = None, tag_expression: str = "*") -> PulledRecords:
        """`pull` without decoding: the records as the broker stored them, CRCs checked."""
        request = pb.PullBatchRequest(group=self._group.name, topic=topic, queue_id=queue_id, offset=offset,
                                      max_count=min(max_count, limits.PULL_BATCH_MAX), tag_expression=tag_expression)
        tags = _tags(tag_expression)

        async def pull_from(queue: RouteQueue) -> PulledRecords:
            response = await call(self._channels.reader(queue.address).PullBatch, request, self._timeout_s,
                                  self._channels.metadata)
            records, starts = response.records, _record_starts(response.records)
            if tags is not None:  # the broker filters by tag hash: drop the records of a colliding tag
                kept = [(start, end) for start, end in zip(starts, starts[1:])
                        if codec.message_property(records, start, message_properties.TAGS) in tags]
                if len(kept) < len(starts) - 1:
                    records = b"".join(records[start:end] for start, end in kept)
                    starts = [0]
                    for start, end in kept:
                        starts.append(starts[-1] + end - start)
            return PulledRecords(pb.PullStatus.Name(response.status), records, starts, response.next_offset)

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


def _duration(seconds: float) -> Duration:
    duration = Duration()
    duration.FromNanoseconds(int(seconds * 1e9))
    return duration


def _timestamp(milliseconds: int) -> Timestamp:
    timestamp = Timestamp()
    timestamp.FromMilliseconds(milliseconds)
    return timestamp
