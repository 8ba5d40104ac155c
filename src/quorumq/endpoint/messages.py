"""Checking v5 messages on the way in and building them on the way out.

What a client sends is validated here against `limits` before the broker sees it; a message that
breaks a rule gets the catalogue error naming the rule. The rules on a message's own fields live in
core/message_rules.py, which quorumq's producer applies too.
"""

import hashlib

from google.protobuf.timestamp_pb2 import Timestamp
from rocketmq.grpc_protocol import definition_pb2 as v5

from quorumq import limits
from quorumq.core import properties
from quorumq.core.message_rules import check_body, quoted, stored_properties
from quorumq.core.message_types import TopicMessageType, message_type
from quorumq.core.timers import delivery_ms
from quorumq.errors import Error, QuorumqError
from quorumq.protocol.v5 import resource, topic_name
from quorumq.store import MessageIn

__all__ = ["answer_bytes", "incoming", "outgoing", "tag_filter"]

# Enum values read once: look-ups through the generated wrappers are slow on the hot path.
_NORMAL = v5.MessageType.NORMAL
_GZIP = v5.Encoding.GZIP
_IDENTITY = v5.Encoding.IDENTITY
_MD5 = v5.DigestType.MD5
_TRANSACTION = v5.MessageType.TRANSACTION
_UNSUPPORTED_TYPES = {v5.MessageType.LITE: "LITE", v5.MessageType.PRIORITY: "PRIORITY"}
# A delivered message's type, from its stored properties (core/message_types.py).
_V5_TYPES = {TopicMessageType.NORMAL: _NORMAL, TopicMessageType.FIFO: v5.MessageType.FIFO,
             TopicMessageType.DELAY: v5.MessageType.DELAY, TopicMessageType.TRANSACTION: v5.MessageType.TRANSACTION}


def incoming(message: v5.Message, max_body_bytes: int, explicit_queue: bool) -> MessageIn:
    """An incoming message as the store takes it, after every check on it (each field read once:
    this runs for every message sent). Its type is its properties' (a message group makes it
    FIFO, a delivery timestamp DELAY), as RocketMQ decides it: the type the client names is read
    only for a transaction, which has no property of its own on the wire, and to refuse the types
    not built."""
    system = message.system_properties
    kind = system.message_type
    if kind != _NORMAL and kind in _UNSUPPORTED_TYPES:
        raise QuorumqError(Error.MESSAGE_TYPE_UNSUPPORTED,
                           f"{_UNSUPPORTED_TYPES[kind]} messages are not supported; send NORMAL, FIFO, DELAY or "
                           "TRANSACTION messages")
    body = message.body
    check_body(body, max_body_bytes)
    stored = stored_properties(system.message_id, message.user_properties,
                               system.tag if system.HasField("tag") else None, system.keys,
                               system.body_encoding == _GZIP,
                               system.message_group if system.HasField("message_group") else None)
    if kind == _TRANSACTION:
        stored[properties.TRANSACTION] = "true"
    if system.HasField("delivery_timestamp"):
        if kind == _TRANSACTION:
            raise QuorumqError(Error.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                               "a transactional message takes no delivery timestamp")
        stamp = system.delivery_timestamp
        stored[properties.TIMER_DELIVER_MS] = str(delivery_ms(stamp.seconds, stamp.nanos))
    born = system.born_timestamp
    return MessageIn(topic=topic_name(message.topic), queue_id=system.queue_id if explicit_queue else -1,
                     body=body, properties=stored, born_timestamp_ms=born.seconds * 1000 + born.nanos // 1_000_000,
                     born_host=system.born_host[:limits.HOST_LENGTH_MAX])


def _timestamp(ms: int) -> Timestamp:
    return Timestamp(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def outgoing(stored, delivery_attempt: int = 1) -> v5.Message:
    """A stored message as the v5 protocol delivers it; the caller adds receipt handle and lease."""
    props = stored.properties
    system = v5.SystemProperties(
        message_id=props.get(properties.MESSAGE_ID, ""),
        body_digest=v5.Digest(type=_MD5, checksum=hashlib.md5(stored.body).hexdigest().upper()),
        body_encoding=_GZIP if props.get(properties.BODY_ENCODING) == "GZIP" else _IDENTITY,
        message_type=_V5_TYPES[message_type(props)],
        born_timestamp=_timestamp(stored.born_timestamp_ms),
        born_host=stored.born_host,
        store_timestamp=_timestamp(stored.store_timestamp_ms),
        store_host=stored.store_host,
        queue_id=stored.queue_id,
        queue_offset=stored.queue_offset,
        delivery_attempt=delivery_attempt,
    )
    if properties.TAGS in props:
        system.tag = props[properties.TAGS]
    if properties.KEYS in props:
        system.keys.extend(props[properties.KEYS].split(" "))
    if properties.MESSAGE_GROUP in props:
        system.message_group = props[properties.MESSAGE_GROUP]
    if properties.TIMER_DELIVER_MS in props:
        system.delivery_timestamp.CopyFrom(_timestamp(int(props[properties.TIMER_DELIVER_MS])))
    if properties.DLQ_ORIGIN_TOPIC in props and properties.DLQ_ORIGIN_MESSAGE_ID in props:  # a dead letter's copy
        system.dead_letter_queue.topic = props[properties.DLQ_ORIGIN_TOPIC]
        system.dead_letter_queue.message_id = props[properties.DLQ_ORIGIN_MESSAGE_ID]
    user = {key: value for key, value in props.items() if key not in properties.HIDDEN}
    return v5.Message(topic=resource(stored.topic), user_properties=user, system_properties=system,
                      body=stored.body)


def answer_bytes(message: v5.Message) -> int:
    """The size of the ReceiveMessageResponse that carries `message`: its field tag, length and body."""
    size = message.ByteSize()
    return 1 + (size.bit_length() + 6) // 7 + size


def tag_filter(expression: v5.FilterExpression) -> frozenset[str] | None:
    """The tags a TAG filter selects; None selects everything. SQL filters are not built yet."""
    if expression.type == v5.FilterType.SQL:
        raise QuorumqError(Error.ILLEGAL_FILTER_EXPRESSION, "SQL92 filters are not supported yet; use TAG")
    text = expression.expression.strip()
    if not text or text == "*":
        return None
    tags = frozenset(part.strip() for part in text.split("||") if part.strip())
    if not tags:
        raise QuorumqError(Error.ILLEGAL_FILTER_EXPRESSION, f"tag expression {quoted(text)} selects nothing")
    return tags
