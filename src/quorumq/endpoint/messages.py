"""Building v5 messages on the way out, and reading a receive's filter. The checks on the way in
are protocol/messages.py's `incoming`, which a proxy applies too."""

import hashlib

from google.protobuf.timestamp_pb2 import Timestamp
from rocketmq.grpc_protocol import definition_pb2 as v5

from quorumq.core import properties
from quorumq.core.message_rules import quoted
from quorumq.core.message_types import TopicMessageType, message_type
from quorumq.errors import Error, QuorumqError
from quorumq.protocol.v5 import resource

__all__ = ["answer_bytes", "outgoing", "tag_filter"]

# Enum values read once: look-ups through the generated wrappers are slow on the hot path.
_NORMAL = v5.MessageType.NORMAL
_GZIP = v5.Encoding.GZIP
_IDENTITY = v5.Encoding.IDENTITY
_MD5 = v5.DigestType.MD5
# A delivered message's type, from its stored properties (core/message_types.py).
_V5_TYPES = {TopicMessageType.NORMAL: _NORMAL, TopicMessageType.FIFO: v5.MessageType.FIFO,
             TopicMessageType.DELAY: v5.MessageType.DELAY, TopicMessageType.TRANSACTION: v5.MessageType.TRANSACTION}


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
