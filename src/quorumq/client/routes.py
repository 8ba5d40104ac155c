"""Channels to brokers and the topic routes learnt from the access point (v5 QueryRoute)."""

import asyncio
import itertools
import os
import socket
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

import grpc
from rocketmq.grpc_protocol import definition_pb2 as v5
from rocketmq.grpc_protocol import service_pb2 as rpc
from rocketmq.grpc_protocol import service_pb2_grpc as rpc_grpc

from quorumq import heap, limits
from quorumq.client.errors import ClientError, check
from quorumq.client.signing import signature, signers
from quorumq.cluster import cluster_pb2 as pb
from quorumq.cluster import cluster_pb2_grpc as pb_grpc
from quorumq.core.auth import DATE_TIME_FORMAT, SIGNED_HEADER, Credentials, authorization
from quorumq.tls import client_tls

# A route is asked again after this long even without failures, as the official client does.
ROUTE_TTL_S = 30.0
REQUEST_TIMEOUT_S = 10.0
SEND_BATCH = "/quorumq.cluster.MessageWriter/SendBatch"

_READABLE = frozenset({v5.Permission.READ, v5.Permission.READ_WRITE})
_WRITABLE = frozenset({v5.Permission.WRITE, v5.Permission.READ_WRITE})

_RECONNECT = (
    ("grpc.initial_reconnect_backoff_ms", limits.GRPC_RECONNECT_BACKOFF_MS_MIN),
    ("grpc.max_reconnect_backoff_ms", limits.GRPC_RECONNECT_BACKOFF_MS_MAX),
    ("grpc.min_reconnect_backoff_ms", limits.GRPC_CONNECT_TIMEOUT_MS_MIN),
)
_CHANNEL_OPTIONS = (
    # A pull answer holds up to PULL_BYTES_MAX; one message may be as large as the config ceiling.
    ("grpc.max_receive_message_length", limits.grpc_receive_bytes(limits.MESSAGE_BODY_BYTES_CEILING)),
    ("grpc.max_send_message_length", -1),
    ("grpc.enable_retries", 0),
)

_client_index = itertools.count()


def open_channel(address: str, *options: tuple[str, Any], credentials: Credentials | None = None) -> grpc.aio.Channel:
    """A channel to `address`, as every quorumq process opens one: it reconnects within about a
    second of the peer coming back (limits.GRPC_RECONNECT_BACKOFF_MS_MAX), speaks TLS when the
    process does (tls.client_tls), and with `credentials` signs its cluster-protocol calls (signing.py)."""
    interceptors = signers(credentials) if credentials else None
    client = client_tls()
    if client is None:
        return grpc.aio.insecure_channel(address, options=[*options, *_RECONNECT], interceptors=interceptors)
    return grpc.aio.secure_channel(address, client.channel_credentials(), options=[*options, *_RECONNECT],
                                   interceptors=interceptors)


def local_host() -> str:
    """This machine's address as RocketMQ reports it in born_host; loopback when unknown."""
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


@dataclass(frozen=True, slots=True)
class RouteQueue:
    """One message queue of a topic on one broker, as the route names it."""

    topic: str
    queue_id: int
    broker_name: str
    address: str  # host:port of the broker's v5 endpoint
    permission: int  # a v5 Permission

    @property
    def readable(self) -> bool:
        return self.permission in _READABLE

    @property
    def writable(self) -> bool:
        return self.permission in _WRITABLE

    def to_proto(self) -> v5.MessageQueue:
        return v5.MessageQueue(topic=v5.Resource(name=self.topic), id=self.queue_id,
                               broker=v5.Broker(name=self.broker_name))


def v5_signature(credentials: Credentials) -> tuple[tuple[str, str], ...]:
    """The headers that sign a v5 call made now: its date-time and the authorization over it."""
    date_time = time.strftime(DATE_TIME_FORMAT, time.gmtime())  # UTC, whatever the process's zone
    return (SIGNED_HEADER, date_time), ("authorization", authorization(credentials, date_time))


class Channels:
    """One gRPC channel per address, shared by every request of a client, and the headers each
    request carries: the client's id and, with credentials, its signature (core/auth.py for v5
    calls, client/signing.py for the cluster protocol's)."""

    def __init__(self, credentials: Credentials | None = None) -> None:
        heap.keep_freed_memory()  # batch requests and answers are large: reuse their memory
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._messaging: dict[str, rpc_grpc.MessagingServiceStub] = {}
        self._readers: dict[str, pb_grpc.MessageReaderStub] = {}
        self._batch_channels: dict[str, grpc.aio.Channel] = {}  # unsigned: send_batch signs
        self._batch_senders: dict[str, grpc.aio.UnaryUnaryMultiCallable] = {}
        client_id = f"{socket.gethostname()}@{os.getpid()}@quorumq-{next(_client_index)}@{time.time_ns():x}"
        self._client_id = (("x-mq-client-id", client_id),)
        self._credentials = credentials

    @property
    def metadata(self) -> tuple[tuple[str, str], ...]:
        if self._credentials is None:
            return self._client_id
        return (*self._client_id, *v5_signature(self._credentials))

    def channel(self, address: str) -> grpc.aio.Channel:
        channel = self._channels.get(address)
        if channel is None:
            channel = open_channel(address, *_CHANNEL_OPTIONS, credentials=self._credentials)
            self._channels[address] = channel
        return channel

    def reader(self, address: str) -> pb_grpc.MessageReaderStub:
        stub = self._readers.get(address)
        if stub is None:
            stub = self._readers[address] = pb_grpc.MessageReaderStub(self.channel(address))
        return stub

    async def send_batch(self, address: str, request: bytes, timeout: float) -> pb.SendBatchResponse:
        """MessageWriter.SendBatch on `address` of a request already serialized. A batch is large
        and the hottest call: its bytes are written once and signed as they are, here, on a channel
        of its own that no interceptor slows (each costs a call tens of microseconds)."""
        sender = self._batch_senders.get(address)
        if sender is None:
            channel = self._batch_channels[address] = open_channel(address, *_CHANNEL_OPTIONS)
            sender = self._batch_senders[address] = channel.unary_unary(
                SEND_BATCH, request_serializer=None, response_deserializer=pb.SendBatchResponse.FromString)
        signed = signature(self._credentials, SEND_BATCH, request) if self._credentials is not None else ()
        return await call(sender, request, timeout, (*self._client_id, *signed))

    def messaging(self, address: str) -> rpc_grpc.MessagingServiceStub:
        stub = self._messaging.get(address)
        if stub is None:
            stub = rpc_grpc.MessagingServiceStub(self.channel(address))
            self._messaging[address] = stub
        return stub

    async def close(self) -> None:
        channels = [*self._channels.values(), *self._batch_channels.values()]
        self._channels, self._batch_channels, self._messaging, self._readers, self._batch_senders = {}, {}, {}, {}, {}
        for channel in channels:
            await channel.close()


async def call(method: Callable[..., Awaitable[Any]], request: Any, timeout: float,
               metadata: tuple = ()) -> Any:
    """One unary call; a gRPC failure becomes a ClientError."""
    try:
        return await method(request, timeout=timeout, metadata=metadata)
    except grpc.RpcError as error:
        raise ClientError.from_rpc(error) from None


class Routes:
    """Topic routes from the access point, cached for ROUTE_TTL_S or until `forget`.

    The access point may list several name servers as "h1:p1;h2:p2"; they are asked in turn.
    """

    def __init__(self, access_point: str, channels: Channels, timeout_s: float = REQUEST_TIMEOUT_S) -> None:
        self._access_points = [a.strip() for a in access_point.split(";") if a.strip()]
        if not self._access_points:
            raise ValueError("an access point is host:port")
        self._channels = channels
        self._timeout_s = timeout_s
        self._cache: dict[str, tuple[float, rpc.QueryRouteResponse, list[RouteQueue]]] = {}
        self._lock = asyncio.Lock()

    async def queues(self, topic: str) -> list[RouteQueue]:
        response, queues = await self._route(topic)
        check(response.status)
        return queues

    async def route(self, topic: str) -> rpc.QueryRouteResponse:
        """The access point's answer for a topic, as it gave it (a proxy passes it on)."""
        response, _ = await self._route(topic)
        return response

    async def _route(self, topic: str) -> tuple[rpc.QueryRouteResponse, list[RouteQueue]]:
        """A route found is kept; one refused (no such topic yet) is asked again next time."""
        cached = self._cache.get(topic)
        if cached and time.monotonic() - cached[0] < ROUTE_TTL_S:
            return cached[1:]
        async with self._lock:  # one QueryRoute per topic, however many callers wait for it
            cached = self._cache.get(topic)
            if cached and time.monotonic() - cached[0] < ROUTE_TTL_S:
                return cached[1:]
            response = await self._query(topic)
            if response.status.code != v5.Code.OK:
                return response, []
            queues = _route_queues(response)
            self._cache[topic] = (time.monotonic(), response, queues)
            return response, queues

    def forget(self, topic: str) -> None:
        self._cache.pop(topic, None)

    async def find(self, topic: str, queue_id: int, broker_name: str | None = None) -> RouteQueue:
        """The queue with this id, on the named broker or else on the first broker (by name) that has it."""
        for queue in await self.queues(topic):
            if queue.queue_id == queue_id and broker_name in (None, queue.broker_name):
                return queue
        where = f" on {broker_name}" if broker_name else ""
        raise ClientError("BAD_REQUEST", f"topic {topic} has no queue {queue_id}{where}")

    async def _query(self, topic: str) -> rpc.QueryRouteResponse:
        last_error: ClientError | None = None
        for access_point in self._access_points:
            host, port = access_point.rsplit(":", 1)
            request = rpc.QueryRouteRequest(
                topic=v5.Resource(name=topic),
                endpoints=v5.Endpoints(scheme=v5.AddressScheme.IPv4,
                                       addresses=[v5.Address(host=host, port=int(port))]))
            try:
                return await call(self._channels.messaging(access_point).QueryRoute, request,
                                  self._timeout_s, self._channels.metadata)
            except ClientError as error:
                if not error.unreachable:
                    raise
                last_error = error
        raise last_error


def _route_queues(response: rpc.QueryRouteResponse) -> list[RouteQueue]:
    """In controller mode the route lists each queue once per replica, master first, for the
    official clients, whose requests a replica forwards (protocol/v5.message_queues). This client's
    SendBatch only a master takes (a slave's refusal costs a backoff and a route query), and a
    slave's reads may lag: each queue is kept at its first entry."""
    queues: dict[tuple[str, int], RouteQueue] = {}
    for queue in map(_route_queue, response.message_queues):
        queues.setdefault((queue.broker_name, queue.queue_id), queue)
    return [queues[key] for key in sorted(queues)]


def _route_queue(queue: v5.MessageQueue) -> RouteQueue:
    address = queue.broker.endpoints.addresses[0]
    return RouteQueue(topic=queue.topic.name, queue_id=queue.id, broker_name=queue.broker.name,
                      address=f"{address.host}:{address.port}", permission=queue.permission)
