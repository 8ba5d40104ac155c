"""A proxy's sends as records: the messages of a merged line (proxy/sends.py), checked as the
broker checks a v5 message (protocol/messages.py `incoming`), encoded as commit-log records
(core/codec.py) and written with MessageWriter.SendBatch, one request per queue; the broker
patches and appends them where its v5 SendMessage would parse and re-encode each message. The
answer is built as the broker's v5 SendMessage answers: one entry per message, in order.

A message SendBatch cannot carry with the same meaning stays a v5 message: a delay or a
transactional one (the broker parks them in its system topics and answers a recall handle or a
transaction id of its own; SendBatch refuses them), one whose properties do not encode (the broker
names the error), and one to another topic than the line's.
"""

from collections.abc import Sequence
from dataclasses import dataclass, field

from rocketmq.grpc_protocol import definition_pb2 as v5
from rocketmq.grpc_protocol import service_pb2 as v5s

from quorumq.cluster import cluster_pb2 as pb
from quorumq.core import codec, properties
from quorumq.core.codec import MessageIn
from quorumq.core.message_types import fifo_queue
from quorumq.core.put_status import PutStatus
from quorumq.errors import QuorumqError
from quorumq.protocol.messages import incoming, stored_status
from quorumq.protocol.v5 import error_status

_WRITABLE = frozenset({v5.Permission.WRITE, v5.Permission.READ_WRITE})
_PARKED = (properties.TRANSACTION, properties.TIMER_DELIVER_MS)  # stored in a system topic first


@dataclass
class Record:
    index: int  # the message's place in the merged request
    message: MessageIn
    encoded_properties: bytes


@dataclass
class Plan:
    """Where each message of a merged request goes: answered here (a broken rule), in a record to
    a queue, or to the broker as a v5 message."""

    entries: list[v5s.SendResultEntry | None]
    queues: dict[int, list[Record]] = field(default_factory=dict)
    v5_indexes: list[int] = field(default_factory=list)


def write_queues(route_queues: Sequence[v5.MessageQueue], broker_name: str) -> int:
    """The number of queues the group takes sends on (ids 0..n-1), as its route says."""
    return len({queue.id for queue in route_queues if queue.broker.name == broker_name
                and queue.permission in _WRITABLE})


def plan(messages: Sequence[v5.Message], topic: str, max_body_bytes: int, queue_count: int, turn: int) -> Plan:
    """Check each message; one to `topic` (the line's: a raw client may name others in one request)
    goes as a record, a FIFO message to its group's queue (the broker's rule, core/message_types.py
    fifo_queue), the others to queue `turn` round robin, as the broker picks for a v5 message."""
    planned = Plan(entries=[None] * len(messages))
    default_queue = turn % queue_count
    for index, message in enumerate(messages):
        try:
            checked = incoming(message, max_body_bytes, explicit_queue=False)
        except QuorumqError as error:
            planned.entries[index] = failed_entry(message, error_status(error))
            continue
        stored = checked.properties
        try:
            encoded = codec.encode_properties(stored)
        except ValueError:
            encoded = None
        if encoded is None or checked.topic != topic or any(name in stored for name in _PARKED):
            planned.v5_indexes.append(index)
            continue
        group = stored.get(properties.MESSAGE_GROUP)
        queue_id = fifo_queue(group, queue_count) if group is not None else default_queue
        planned.queues.setdefault(queue_id, []).append(Record(index, checked, encoded))
    return planned


def batch_request(topic: str, queue_id: int, records: Sequence[Record]) -> bytes:
    """One SendBatch request of `records` for `queue_id`, the broker's assigned fields at 0; its id
    is the first message's (a resend of the same request is answered from the first copy)."""
    topic_bytes = topic.encode()
    hosts = [record.message.born_host.encode() for record in records]
    sizes = [codec.record_size(topic_bytes, host, record.encoded_properties, record.message.body)
             for record, host in zip(records, hosts)]
    buffer = bytearray(sum(sizes))
    view = memoryview(buffer)
    position = 0
    for record, host, size in zip(records, hosts, sizes):
        message = record.message
        codec.encode_record(view, position, size, topic_bytes, queue_id, 0, 0, message.born_timestamp_ms, host, 0,
                            record.encoded_properties, message.body)
        position += size
    view.release()
    return pb.SendBatchRequest(topic=topic, queue_id=queue_id, records=bytes(buffer), count=len(records),
                               request_id=records[0].message.properties[properties.MESSAGE_ID]).SerializeToString()


def stored_entries(response: pb.SendBatchResponse, records: Sequence[Record],
                   messages: Sequence[v5.Message]) -> list[tuple[int, v5s.SendResultEntry]]:
    """Each record's entry from the broker's answer to its SendBatch, as its v5 SendMessage would
    answer the message: the put status of the request, and for a stored one its queue offset."""
    put_status = PutStatus(response.status)
    status = stored_status(put_status, response.master_epoch)
    answered = []
    for position, record in enumerate(records):
        message_id = messages[record.index].system_properties.message_id
        offset = response.first_queue_offset + position if put_status.stored else 0
        answered.append((record.index, v5s.SendResultEntry(status=status, message_id=message_id,
                                                          transaction_id=message_id, offset=offset)))
    return answered


def failed_entry(message: v5.Message, status: v5.Status) -> v5s.SendResultEntry:
    """The entry of a message not stored, as the broker answers it: its id as the transaction id,
    offset 0."""
    message_id = message.system_properties.message_id
    return v5s.SendResultEntry(status=status, message_id=message_id, transaction_id=message_id)
