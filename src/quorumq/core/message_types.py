"""Topic message types (RocketMQ's TopicMessageType, the topic attribute `message.type`): which
messages a topic takes, a message's type from its properties, and the attribute syntax of
`updateTopic -a` (pure; no I/O).
"""

import hashlib
from collections.abc import Mapping
from enum import Enum

from quorumq.core import properties
from quorumq.core.message_rules import quoted
from quorumq.errors import Error, QuorumqError

MESSAGE_TYPE_ATTRIBUTE = "message.type"


class TopicMessageType(Enum):
    UNSPECIFIED = "UNSPECIFIED"
    NORMAL = "NORMAL"
    FIFO = "FIFO"
    DELAY = "DELAY"
    TRANSACTION = "TRANSACTION"
    MIXED = "MIXED"


_NORMAL = TopicMessageType.NORMAL
_FIFO = TopicMessageType.FIFO
_DELAY = TopicMessageType.DELAY
_TRANSACTION = TopicMessageType.TRANSACTION

# The message types a topic of each type takes, in the order routes announce them (RocketMQ's
# RouteActivity); an UNSPECIFIED topic takes none.
ACCEPTED: dict[TopicMessageType, tuple[TopicMessageType, ...]] = {
    TopicMessageType.UNSPECIFIED: (),
    _NORMAL: (_NORMAL,),
    _FIFO: (_FIFO,),
    _DELAY: (_DELAY,),
    _TRANSACTION: (_TRANSACTION,),
    TopicMessageType.MIXED: (_NORMAL, _FIFO, _DELAY, _TRANSACTION),
}


def message_type(props: Mapping[str, str]) -> TopicMessageType:
    """A message's type from its stored properties, as RocketMQ decides it (not from the type a
    client names): a transaction, then a delay, then a message group (FIFO); else NORMAL."""
    if props.get(properties.TRANSACTION) == "true":
        return _TRANSACTION
    if any(name in props for name in properties.DELAY):
        return _DELAY
    if properties.MESSAGE_GROUP in props:
        return _FIFO
    return _NORMAL


def check_message_type(topic: str, topic_type: TopicMessageType, props: Mapping[str, str]) -> None:
    """Refuse a message its topic's type does not take (MESSAGE_PROPERTY_CONFLICT_WITH_TYPE)."""
    actual = message_type(props)
    if actual not in ACCEPTED[topic_type]:
        raise QuorumqError(Error.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                           f"topic {topic} takes {topic_type.value} messages, not {actual.value}"
                           + (" (a FIFO message needs a message group)" if topic_type is _FIFO else ""))


def fifo_queue(group: str, write_queue_nums: int) -> int:
    """A FIFO message's queue among its topic's write queues on a broker, chosen by the broker
    whatever queue the client asked for (as RocketMQ's proxy does), so that one message group is
    one queue: a stable hash of the group (the official Python client's, SHA-256 read big-endian)."""
    return int.from_bytes(hashlib.sha256(group.encode()).digest(), "big") % write_queue_nums


def parse_message_type(text: str) -> TopicMessageType:
    """A topic's type as an admin names it: UNSPECIFIED (a topic that takes nothing) is refused."""
    kind = TopicMessageType.__members__.get(text)
    if kind is None or kind is TopicMessageType.UNSPECIFIED:
        raise QuorumqError(Error.ILLEGAL_TOPIC_ATTRIBUTE,
                           f"{MESSAGE_TYPE_ATTRIBUTE} {quoted(text)} is none of "
                           f"{', '.join(kind.value for kind in ACCEPTED if ACCEPTED[kind])}")
    return kind


def parse_attributes(text: str) -> dict[str, str | None]:
    """RocketMQ's attribute syntax `+key=value,-key` (AttributeParser): each key to set -> its value,
    each key to remove -> None. quorumq's topics have one attribute, message.type."""
    changes: dict[str, str | None] = {}
    for item in (part.strip() for part in text.split(",")):
        sign, body = item[:1], item[1:]
        key, equals, value = body.partition("=")
        if sign not in ("+", "-") or not key or (sign == "+") != bool(equals) or key in changes:
            raise QuorumqError(Error.ILLEGAL_TOPIC_ATTRIBUTE,
                               f"attribute {quoted(item)} is neither +key=value nor -key (once per key)")
        if key != MESSAGE_TYPE_ATTRIBUTE:
            raise QuorumqError(Error.ILLEGAL_TOPIC_ATTRIBUTE,
                               f"unknown topic attribute {quoted(key)}; topics take {MESSAGE_TYPE_ATTRIBUTE}")
        if sign == "+":
            parse_message_type(value)
        changes[key] = value if sign == "+" else None
    return changes
