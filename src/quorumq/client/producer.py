"""The batch producer: many messages per SendMessage request and several requests in flight.

A Python gRPC server spends hundreds of microseconds per call, so throughput comes from packing
up to BATCH_MESSAGES_MAX messages into one request and keeping a window of requests on the wire.
"""

import asyncio
import itertools
import os
import time
from dataclasses import dataclass, field
from typing import Sequence

from google.protobuf.timestamp_pb2 import Timestamp
from rocketmq.grpc_protocol import definition_pb2 as v5
from rocketmq.grpc_protocol import service_pb2 as rpc

from quorumq import limits
from quorumq.client.errors import ClientError, code_name, split_name
from quorumq.client.routes import REQUEST_TIMEOUT_S, Channels, RouteQueue, Routes, call, local_host

SEND_OK = "SEND_OK"
# Tells the broker to store each message in its system_properties.queue_id (the producer picks queues).
EXPLICIT_QUEUE = ("x-quorumq-explicit-queue", "1")
# Framing and system properties of one message, counted against BATCH_BYTES_MAX with its body.
MESSAGE_OVERHEAD_BYTES = 256
SEND_ATTEMPTS_MAX = 3  # tries of one request against brokers that do not answer
BACKOFF_MIN_S = 0.01
BACKOFF_MAX_S = 1.0
# Enum values read once: look-ups through the generated wrappers are slow per message.
_CODE_OK = v5.Code.OK
_CODE_TOO_MANY_REQUESTS = v5.Code.TOO_MANY_REQUESTS


@dataclass
class Message:
    body: bytes
    tag: str | None = None
    keys: Sequence[str] = ()
    properties: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if isinstance(self.keys, str):  # one key given bare
            self.keys = (self.keys,)

    def size(self) -> int:
        extras = sum(len(k) for k in self.keys) + sum(len(k) + len(v) for k, v in self.properties.items())
        return len(self.body) + len(self.tag or "") + extras + MESSAGE_OVERHEAD_BYTES


@dataclass(frozen=True, slots=True)
class SendResult:
    status: str  # SEND_OK, FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT, ... or an error name
    message_id: str
    queue_id: int
    queue_offset: int  # where the broker stored it; -1 when the whole request was refused
    broker_name: str
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.status == SEND_OK


# Message ids are 32 upper-hex characters like RocketMQ's UNIQ_KEY: a per-process prefix (pid and
# random bytes) and a counter, so making one costs a string format.
def _new_id_prefix() -> str:
    return f"{os.getpid() & 0xFFFF:04X}{os.urandom(6).hex().upper()}"


_id_prefix = _new_id_prefix()
_id_counter = itertools.count()


def _reset_ids_after_fork() -> None:
    global _id_prefix, _id_counter
    _id_prefix, _id_counter = _new_id_prefix(), itertools.count()


os.register_at_fork(after_in_child=_reset_ids_after_fork)


def new_message_id() -> str:
    return f"{_id_prefix}{next(_id_counter):016X}"


def batches(messages: Sequence[Message], count_max: int, bytes_max: int) -> list[Sequence[Message]]:
    """Consecutive runs of at most count_max messages and bytes_max bytes (a larger message alone)."""
    runs: list[Sequence[Message]] = []
    start, size = 0, 0
    for index, message in enumerate(messages):
        message_size = message.size()
        if index > start and (index - start == count_max or size + message_size > bytes_max):
            runs.append(messages[start:index])
            start, size = index, 0
        size += message_size
    if start < len(messages):
        runs.append(messages[start:])
    return runs


class Producer:
    """Sends batches to the queues of a topic; use `async with Producer(access_point) as producer`."""

    def __init__(self, access_point: str, *, window: int = 8,
                 batch_messages: int = limits.BATCH_MESSAGES_MAX,
                 timeout_s: float = REQUEST_TIMEOUT_S, retry_s: float = 30.0) -> None:
        if not 0 < batch_messages <= limits.BATCH_MESSAGES_MAX:
            raise ValueError(f"batch_messages must lie in 1..{limits.BATCH_MESSAGES_MAX}")
        self._channels = Channels()
        self._routes = Routes(access_point, self._channels, timeout_s)
        self._window = asyncio.Semaphore(window)
        self._batch_messages = batch_messages
        self._timeout_s = timeout_s
        self._retry_s = retry_s  # how long throttled (TOO_MANY_REQUESTS) messages are retried
        self._metadata = self._channels.metadata + (EXPLICIT_QUEUE,)
        self._next_queue = itertools.count()
        self._host = local_host()

    async def __aenter__(self) -> "Producer":
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._channels.close()

    async def send(self, topic: str, message: Message, queue_id: int | None = None,
                   broker_name: str | None = None) -> SendResult:
        return (await self.send_batch(topic, [message], queue_id, broker_name))[0]

    async def send_batch(self, topic: str, messages: Sequence[Message], queue_id: int | None = None,
                         broker_name: str | None = None) -> list[SendResult]:
        """One result per message, in order.

        Without queue_id the requests go out in parallel, each to the next writable queue round-robin,
        and only each request keeps its order. With queue_id every message goes to that queue (on
        broker_name, or the first broker by name that has it) and is stored in the order given: the
        requests go one after another, since the broker may handle requests in flight in any order.
        Per-message failures come back as results; a request no broker answers raises ClientError.
        """
        runs = batches(messages, self._batch_messages, limits.BATCH_BYTES_MAX)
        if queue_id is None:
            sent = await asyncio.gather(*(self._send_run(topic, run, None, broker_name) for run in runs))
        else:
            sent = [await self._send_run(topic, run, queue_id, broker_name) for run in runs]
        return [result for run_results in sent for result in run_results]

    async def _send_run(self, topic: str, messages: Sequence[Message], queue_id: int | None,
                        broker_name: str | None) -> list[SendResult]:
        ids = [new_message_id() for _ in messages]  # the same ids on every retry
        results: list[SendResult | None] = [None] * len(messages)
        pending = list(range(len(messages)))
        deadline = time.monotonic() + self._retry_s
        backoff_s, attempts = BACKOFF_MIN_S, 0
        while pending:
            queue = await self._pick_queue(topic, queue_id, broker_name)
            request = self._request(topic, queue, [messages[i] for i in pending], [ids[i] for i in pending])
            try:
                async with self._window:
                    response = await call(self._channels.messaging(queue.address).SendMessage, request,
                                          self._timeout_s, self._metadata)
            except ClientError as error:
                attempts += 1
                if not error.unreachable or attempts == SEND_ATTEMPTS_MAX:
                    raise
                self._routes.forget(topic)  # the broker may have moved or failed over
                continue
            pending = self._record(response, queue, pending, ids, results)
            if pending:
                if time.monotonic() + backoff_s > deadline:
                    break
                await asyncio.sleep(backoff_s)
                backoff_s = min(2 * backoff_s, BACKOFF_MAX_S)
        return results

    @staticmethod
    def _record(response: rpc.SendMessageResponse, queue: RouteQueue, pending: list[int],
                ids: list[str], results: list[SendResult | None]) -> list[int]:
        """Store the results of one answer; return the indexes throttled with TOO_MANY_REQUESTS."""
        entries = response.entries
        if not entries:  # the whole request was refused
            entries = [rpc.SendResultEntry(status=response.status, offset=-1)] * len(pending)
        elif len(entries) != len(pending):
            raise ClientError("INTERNAL_ERROR", f"{len(entries)} send results for {len(pending)} messages")
        throttled = []
        for index, entry in zip(pending, entries):
            status = entry.status
            code = status.code
            if code == _CODE_OK and status.message == SEND_OK:  # the common case, without parsing
                name, detail = SEND_OK, ""
            else:
                name, detail = split_name(status.message, SEND_OK if code == _CODE_OK else code_name(code))
            results[index] = SendResult(name, entry.message_id or ids[index], queue.queue_id, entry.offset,
                                        queue.broker_name, detail)
            if code == _CODE_TOO_MANY_REQUESTS:
                throttled.append(index)
        return throttled

    async def _pick_queue(self, topic: str, queue_id: int | None, broker_name: str | None) -> RouteQueue:
        if queue_id is not None:
            return await self._routes.find(topic, queue_id, broker_name)
        queues = await self._routes.queues(topic)
        writable = [q for q in queues if q.writable and broker_name in (None, q.broker_name)]
        if not writable:
            name = "NO_PERMISSION" if queues else "TOPIC_NOT_FOUND"
            raise ClientError(name, f"topic {topic} has no writable queue")
        return writable[next(self._next_queue) % len(writable)]

    def _request(self, topic: str, queue: RouteQueue, messages: Sequence[Message],
                 ids: Sequence[str]) -> rpc.SendMessageRequest:
        born = Timestamp()
        born.FromNanoseconds(time.time_ns() // 1_000_000 * 1_000_000)
        # Copying one prepared message is faster than setting the shared fields one by one.
        template = v5.Message(topic=v5.Resource(name=topic), system_properties=v5.SystemProperties(
            message_type=v5.MessageType.NORMAL, born_timestamp=born, born_host=self._host,
            body_encoding=v5.Encoding.IDENTITY, queue_id=queue.queue_id))
        request = rpc.SendMessageRequest()
        add = request.messages.add
        for message, message_id in zip(messages, ids):
            proto = add()
            proto.CopyFrom(template)
            proto.body = message.body
            properties = proto.system_properties
            properties.message_id = message_id
            if message.tag:
                properties.tag = message.tag
            if message.keys:
                properties.keys.extend(message.keys)
            if message.properties:
                proto.user_properties.update(message.properties)
        return request
