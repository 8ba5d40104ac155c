"""Topic message types (RocketMQ's TopicMessageType, the topic attribute `message.type`): which
messages a topic takes, a message's type from its properties, and the attribute syntax of
`updateTopic -a` (pure; no I/O).
"""

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum

from quorumq.core import codec, properties
from quorumq.core.message_rules import check_message_group, quoted
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


# A message has a type other than NORMAL only when one of these names is among its properties: a
# record whose encoded properties hold none of them (as "name\x01") is NORMAL, known without decoding.
_TYPE_KEYS = re.compile(b"|".join(re.escape(f"{name}{codec.NAME_VALUE_SEPARATOR}".encode())
                                  for name in (properties.MESSAGE_GROUP, properties.TRANSACTION, *properties.DELAY)))


def check_type_and_group(topic: str, topic_type: TopicMessageType, props: Mapping[str, str]) -> str | None:
    """Refuse a message (its properties) whose group breaks the group rules or whose type the topic's
    does not take; its group, or None."""
    group = props.get(properties.MESSAGE_GROUP)
    if group is not None:
        check_message_group(group)
    check_message_type(topic, topic_type, props)
    return group


@dataclass
class RecordRules:
    """What the records a producer encoded for one queue of a topic (SendBatch) must keep: a type the
    topic takes, and a FIFO record's group the group rules and this queue, the group's queue.
    store/append.py calls `check` on each record's properties as it walks the records."""

    topic: str
    topic_type: TopicMessageType
    queue_id: int
    write_queue_nums: int
    _takes_normal: bool = field(init=False)

    def __post_init__(self) -> None:
        self._takes_normal = _NORMAL in ACCEPTED[self.topic_type]

    def check(self, encoded: bytes | bytearray, start: int, end: int) -> None:
        """Refuse the record whose encoded properties, valid UTF-8, are `encoded[start:end]`."""
        props: Mapping[str, str]
        if _TYPE_KEYS.search(encoded, start, end) is None:
            if self._takes_normal:
                return  # a NORMAL record to a topic that takes it: the common case, one search
            props = {}
        else:
            props = codec.decode_properties(encoded[start:end])
        group = check_type_and_group(self.topic, self.topic_type, props)
        if message_type(props) in (_DELAY, _TRANSACTION):
            raise QuorumqError(Error.MESSAGE_TYPE_UNSUPPORTED, "SendBatch takes no delay or transactional messages: "
                                                               "send them with SendMessage (the v5 protocol)")
        if group is not None and (queue := fifo_queue(group, self.write_queue_nums)) != self.queue_id:
            raise QuorumqError(Error.BAD_REQUEST, f"message group {group!r} goes to queue {queue} of topic "
                                                  f"{self.topic} on this broker, not {self.queue_id}")


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
