"""The batch producer: many messages per request and several requests in flight.

A Python gRPC server spends hundreds of microseconds per call, so throughput comes from packing
up to BATCH_MESSAGES_MAX messages into one request and keeping a window of requests on the wire.
Each request is one queue's messages encoded here as whole commit-log records (core/codec.py)
and sent with cluster.proto MessageWriter.SendBatch: the broker checks each record's CRC, patches
the offsets it assigns and appends the request with one write, instead of parsing and re-encoding
every message as the v5 SendMessage needs.
"""

import asyncio
import itertools
import os
import time
import zlib
from dataclasses import dataclass, field
from typing import Callable, Sequence, TypeVar

from quorumq import limits
from quorumq.client.errors import ClientError
from quorumq.client.routes import REQUEST_TIMEOUT_S, Channels, RouteQueue, Routes, local_host
from quorumq.cluster import cluster_pb2 as pb
from quorumq.core import codec
from quorumq.core.auth import Credentials
from quorumq.core.message_rules import check_body, stored_properties
from quorumq.core.message_types import fifo_queue
from quorumq.errors import Error, QuorumqError

SEND_OK = "SEND_OK"
# Framing and system properties of one message, counted against BATCH_BYTES_MAX with its body.
MESSAGE_OVERHEAD_BYTES = 256
SEND_ATTEMPTS_MAX = 3  # tries of one request against brokers that do not answer
BACKOFF_MIN_S = 0.01
BACKOFF_MAX_S = 1.0
_THROTTLED = Error.TOO_MANY_REQUESTS.name
_NOT_MASTER = Error.SERVICE_NOT_AVAILABLE.name  # a slave, or a fenced broker: the master moved or is elected


T = TypeVar("T")


@dataclass
class Message:
    body: bytes
    tag: str | None = None
    keys: Sequence[str] = ()
    properties: dict[str, str] = field(default_factory=dict)
    # The id it is sent with (default: a new one per send_batch call). Sent again with the same id
    # to the same queue, it is answered from the first copy, within the broker's recent ids
    # (limits.RECENT_MESSAGE_IDS_MAX), even by a master elected since: an idempotent resend.
    message_id: str = ""
    # A FIFO message's group (at most limits.MESSAGE_GROUP_LENGTH_MAX characters), for a FIFO or
    # MIXED topic: every message of a group goes to the queue the broker assigns the group
    # (core/message_types.py fifo_queue), in the order sent (send_batch).
    message_group: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.keys, str):  # one key given bare
            self.keys = (self.keys,)

    def size(self) -> int:
        size = len(self.body) + MESSAGE_OVERHEAD_BYTES
        if self.tag:
            size += len(self.tag)
        if self.keys:  # the sums are skipped for plain messages: this runs for every message sent
            size += sum(len(k) for k in self.keys)
        if self.properties:
            size += sum(len(k) + len(v) for k, v in self.properties.items())
        if self.message_group:
            size += len(self.message_group)
        return size


@dataclass(frozen=True, slots=True)
class SendResult:
    status: str  # SEND_OK, FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT, ... or an error name
    message_id: str
    queue_id: int
    queue_offset: int  # where the broker stored it; -1 when the whole request was refused
    broker_name: str
    detail: str = ""
    master_epoch: int = 0  # controller mode: the epoch of the master that stored it
    # How many requests carried it: above 1 after a resend of a request that got no answer. A
    # resend to another master (a failover) can store it twice: at-least-once, as in RocketMQ.
    attempts: int = 1

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


def batches(messages: Sequence[T], count_max: int, bytes_max: int,
            size_of: Callable[[T], int] = Message.size) -> list[Sequence[T]]:  # type: ignore[assignment]
    """Consecutive runs of at most count_max messages and bytes_max bytes by `size_of` (a larger
    message alone)."""
    runs: list[Sequence[T]] = []
    start, size = 0, 0
    for index, message in enumerate(messages):
        message_size = size_of(message)
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
                 timeout_s: float = REQUEST_TIMEOUT_S, retry_s: float = 30.0,
                 credentials: Credentials | None = None) -> None:
        if not 0 < batch_messages <= limits.BATCH_MESSAGES_MAX:
            raise ValueError(f"batch_messages must lie in 1..{limits.BATCH_MESSAGES_MAX}")
        self._channels = Channels(credentials)  # signs every call
        self._routes = Routes(access_point, self._channels, timeout_s)
        self._window = asyncio.Semaphore(window)
        self._batch_messages = batch_messages
        self._timeout_s = timeout_s
        self._retry_s = retry_s  # how long throttled or not-master (failover) messages are retried
        self._next_queue = itertools.count()
        self._host = local_host().encode()[:limits.HOST_LENGTH_MAX]
        self._encoder = RecordEncoder()  # shared: encoding never awaits, so no two requests meet in it

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
        Without queue_id, messages with a message_group go to their group's queue, each group's in
        the order given (with queue_id the broker refuses a group that queue is not for).
        Per-message failures come back as results: a message that
        breaks a rule here, or a request the broker refused (it stores a request's messages all or
        none). A request no broker answers raises ClientError.
        """
        if queue_id is None and any(message.message_group is not None for message in messages):
            return await self._send_by_group(topic, messages, broker_name)
        runs = batches(messages, self._batch_messages, limits.BATCH_BYTES_MAX)
        if queue_id is None:
            sent = await asyncio.gather(*(self._send_run(topic, run, None, broker_name) for run in runs))
        else:
            sent = [await self._send_run(topic, run, queue_id, broker_name) for run in runs]
        return [result for run_results in sent for result in run_results]

    async def _send_by_group(self, topic: str, messages: Sequence[Message],
                             broker_name: str | None) -> list[SendResult]:
        """Each message with a group to its group's queue: a broker chosen by a hash of the group
        (another than the queue's, so that a broker's queues all get groups), the queue the broker
        assigns among its write queues; each queue's messages in order, the queues side by side.
        Messages without a group go round robin."""
        writable = await self._writable(topic, broker_name)
        brokers = sorted({queue.broker_name for queue in writable})
        write_queues = {broker: len({q.queue_id for q in writable if q.broker_name == broker}) for broker in brokers}
        destinations: dict[tuple[int | None, str | None], list[int]] = {}  # (queue id, broker) -> messages
        for index, message in enumerate(messages):
            destination = (None, broker_name)
            if message.message_group is not None:
                broker = brokers[zlib.crc32(message.message_group.encode()) % len(brokers)]
                destination = (fifo_queue(message.message_group, write_queues[broker]), broker)
            destinations.setdefault(destination, []).append(index)
        sent = await asyncio.gather(*(self.send_batch(topic, [messages[index] for index in indexes], *destination)
                                      for destination, indexes in destinations.items()))
        results: dict[int, SendResult] = {}
        for indexes, answers in zip(destinations.values(), sent):
            results.update(zip(indexes, answers))
        return [results[index] for index in range(len(messages))]

    async def _send_run(self, topic: str, messages: Sequence[Message], queue_id: int | None,
                        broker_name: str | None) -> list[SendResult]:
        ids = [message.message_id or new_message_id() for message in messages]  # the same ids on every retry
        accepted: list[tuple[int, bytes, bytes]] = []  # (index, encoded properties, body)
        refused: list[tuple[int, QuorumqError]] = []
        for index, message in enumerate(messages):
            try:
                accepted.append((index, _encoded_properties(message, ids[index]), message.body))
            except QuorumqError as error:  # the broker would refuse it the same way
                refused.append((index, error))
        results: list[SendResult | None] = [None] * len(messages)

        def encode(queue_id: int) -> bytes:
            return self._encoder.encode(topic.encode(), queue_id, time.time_ns() // 1_000_000, self._host, accepted)

        queue = await self._send_records(topic, queue_id, broker_name, [index for index, _, _ in accepted], encode,
                                         ids, results)
        for index, error in refused:
            results[index] = SendResult(error.error.name, ids[index], queue.queue_id, -1, queue.broker_name,
                                        error.detail)
        return results

    async def send_records(self, topic: str, records: bytes, ids: list[str], queue_id: int,
                           broker_name: str | None = None) -> list[SendResult]:
        """Whole records encoded for `queue_id` (core/codec.py, the assigned fields at 0, the message
        ids `ids` in their properties) as one SendBatch, with send_batch's retries: one result per
        record, in order; the broker stores them all or none and checks them as it checks any."""
        results: list[SendResult | None] = [None] * len(ids)
        await self._send_records(topic, queue_id, broker_name, list(range(len(ids))), lambda _: records, ids,
                                 results)
        return results  # type: ignore[return-value]  # every index was answered

    async def _send_records(self, topic: str, queue_id: int | None, broker_name: str | None, indexes: list[int],
                            encode: Callable[[int], bytes], ids: list[str], results: list[SendResult | None]
                            ) -> RouteQueue:
        """Send the messages at `indexes`, encoded for a queue id by `encode`, as one SendBatch,
        again while the broker answers TOO_MANY_REQUESTS or SERVICE_NOT_AVAILABLE (a failover: on a
        fresh route, within retry_s) or does not answer; returns the queue last used."""
        deadline = time.monotonic() + self._retry_s
        backoff_s, attempts = BACKOFF_MIN_S, 0
        request, request_queue_id = b"", None
        while True:
            queue = await self._pick_queue(topic, queue_id, broker_name)
            if not indexes:
                return queue
            if request_queue_id != queue.queue_id:  # records name their queue
                request = pb.SendBatchRequest(topic=topic, queue_id=queue.queue_id, records=encode(queue.queue_id),
                                              count=len(indexes), request_id=ids[indexes[0]]).SerializeToString()
                request_queue_id = queue.queue_id
            try:
                async with self._window:
                    response = await self._channels.send_batch(queue.address, request, self._timeout_s)
            except ClientError as error:
                if error.error is not None:  # the broker refused the whole request and stored none of it
                    response = pb.SendBatchResponse(status=error.name, detail=error.detail)
                else:  # no answer
                    attempts += 1
                    if not error.unreachable or attempts == SEND_ATTEMPTS_MAX:
                        raise
                    self._routes.forget(topic)  # the broker may have moved or failed over
                    continue
            _record(response, queue, indexes, ids, results, attempts + 1)
            if response.status == _NOT_MASTER:
                self._routes.forget(topic)
            if response.status not in (_THROTTLED, _NOT_MASTER) or time.monotonic() + backoff_s > deadline:
                return queue
            await asyncio.sleep(backoff_s)
            backoff_s = min(2 * backoff_s, BACKOFF_MAX_S)

    async def _pick_queue(self, topic: str, queue_id: int | None, broker_name: str | None) -> RouteQueue:
        if queue_id is not None:
            return await self._routes.find(topic, queue_id, broker_name)
        writable = await self._writable(topic, broker_name)
        return writable[next(self._next_queue) % len(writable)]

    async def _writable(self, topic: str, broker_name: str | None) -> list[RouteQueue]:
        queues = await self._routes.queues(topic)
        writable = [q for q in queues if q.writable and broker_name in (None, q.broker_name)]
        if not writable:
            name = "NO_PERMISSION" if queues else "TOPIC_NOT_FOUND"
            raise ClientError(name, f"topic {topic} has no writable queue")
        return writable


def _encoded_properties(message: Message, message_id: str) -> bytes:
    """The message's properties as the broker stores them, after the rules the broker applies."""
    check_body(message.body, limits.MESSAGE_BODY_BYTES_CEILING)  # the broker checks its maxMessageSize
    return codec.encode_properties(stored_properties(message_id, message.properties, message.tag or None,
                                                     message.keys, message_group=message.message_group))


def _record(response: pb.SendBatchResponse, queue: RouteQueue, indexes: list[int], ids: list[str],
            results: list[SendResult | None], attempts: int) -> None:
    """Store the results of one answer: the broker stores a request's records all or none."""
    stored = response.count > 0
    if stored and response.count != len(indexes):
        raise ClientError("INTERNAL_ERROR", f"{response.count} records stored of {len(indexes)} sent")
    status, detail, first = response.status, response.detail, response.first_queue_offset
    queue_id, broker_name = queue.queue_id, queue.broker_name
    for position, index in enumerate(indexes):
        results[index] = SendResult(status, ids[index], queue_id, first + position if stored else -1, broker_name,
                                    detail, response.master_epoch, attempts)


class RecordEncoder:
    """Encodes a request's messages as commit-log records into one buffer it keeps: fresh memory is
    slow to touch, and the encoding ends with a copy into the request's own bytes anyway."""

    def __init__(self) -> None:
        self._buffer = bytearray(1 << 20)
        self._view = memoryview(self._buffer)

    def encode(self, topic: bytes, queue_id: int, born_timestamp_ms: int, born_host: bytes,
               messages: Sequence[tuple[int, bytes, bytes]]) -> bytes:
        """(index, encoded properties, body) as records for the broker to fill in (codec.encode_record
        with the assigned fields at 0), back to back."""
        record_size, encode_record = codec.record_size, codec.encode_record
        position = 0
        for _, properties, body in messages:
            size = record_size(topic, born_host, properties, body)
            if position + size > len(self._buffer):
                self._grow(position + size)
            encode_record(self._view, position, size, topic, queue_id, 0, 0, born_timestamp_ms, born_host, 0,
                          properties, body)
            position += size
        return self._view[:position].tobytes()

    def _grow(self, size: int) -> None:
        grown = bytearray(max(size, 2 * len(self._buffer)))
        grown[:len(self._buffer)] = self._view
        self._view.release()
        self._buffer, self._view = grown, memoryview(grown)
