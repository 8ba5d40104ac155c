"""What the v5 endpoint accepts from a producer, and the stable error for each rule it breaks; the
size of what it answers a receive with."""

import pytest
from rocketmq.grpc_protocol import definition_pb2 as v5
from rocketmq.grpc_protocol import service_pb2 as v5s

from quorumq import limits
from quorumq.broker.consumers import encode_handle
from quorumq.core import codec, properties
from quorumq.endpoint import messages
from quorumq.errors import Error, QuorumqError
from quorumq.protocol import messages as v5_messages
from quorumq.protocol import v5 as v5_protocol
from quorumq.store import StoredMessage


def message(**system):
    body = system.pop("body", b"hello")
    user = system.pop("user", {})
    system.setdefault("message_type", v5.MessageType.NORMAL)
    props = v5.SystemProperties(message_id="ID1", **system)
    return v5.Message(topic=v5.Resource(name="T"), body=body, user_properties=user, system_properties=props)


def rejected(msg, error):
    with pytest.raises(QuorumqError) as caught:
        v5_messages.incoming(msg, max_body_bytes=1024, explicit_queue=False)
    assert caught.value.error is error
    return str(caught.value)


def test_a_good_message_as_the_store_takes_it():
    good = message(tag="TagA", keys=["k1", "k2"], user={"a": "b"}, queue_id=3, born_host="10.0.0.1")
    good.system_properties.born_timestamp.FromMilliseconds(1234567)
    stored = v5_messages.incoming(good, 1024, explicit_queue=True)
    assert stored.properties == {"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "ID1", "a": "b"}
    assert (stored.topic, stored.queue_id, stored.body, stored.born_timestamp_ms, stored.born_host) == (
        "T", 3, b"hello", 1234567, "10.0.0.1")
    assert v5_messages.incoming(good, 1024, explicit_queue=False).queue_id == -1, "the broker picks the queue"


def test_rules():
    rejected(message(body=b""), Error.MESSAGE_BODY_EMPTY)
    assert "maxMessageSize=1024" in rejected(message(body=b"x" * 1025), Error.MESSAGE_BODY_TOO_LARGE)
    rejected(message(user={"TAGS": "x"}), Error.ILLEGAL_MESSAGE_PROPERTY_KEY)
    rejected(message(user={"": "x"}), Error.ILLEGAL_MESSAGE_PROPERTY_KEY)
    rejected(message(user={"a\x01": "x"}), Error.ILLEGAL_MESSAGE_PROPERTY_KEY)
    rejected(message(tag=" "), Error.ILLEGAL_MESSAGE_TAG)
    rejected(message(tag="a|b"), Error.ILLEGAL_MESSAGE_TAG)
    rejected(message(keys=["has space"]), Error.ILLEGAL_MESSAGE_KEY)
    rejected(message(user={f"k{i}": "v" for i in range(limits.PROPERTY_COUNT_MAX + 1)}),
             Error.MESSAGE_PROPERTIES_TOO_LARGE)
    rejected(message(user={f"k{i}": "v" * 250 for i in range(limits.PROPERTY_COUNT_MAX - 1)}),
             Error.MESSAGE_PROPERTIES_TOO_LARGE)
    rejected(message(keys=[f"k{i}" for i in range(limits.KEYS_PER_MESSAGE_MAX + 1)]), Error.ILLEGAL_MESSAGE_KEY)


@pytest.mark.parametrize("kind", [v5.MessageType.LITE, v5.MessageType.PRIORITY])
def test_message_types_not_built_are_refused(kind):
    assert "not supported" in rejected(message(message_type=kind), Error.MESSAGE_TYPE_UNSUPPORTED)


@pytest.mark.parametrize("seconds, nanos, deliver_ms", [
    (1_795_316_046_612, 0, 1_795_316_046_612),  # the official Python client's milliseconds in `seconds`
    (1_795_316_046, 612_000_000, 1_795_316_046_612),  # real seconds
])
def test_a_delay_message_carries_its_delivery_time_in_and_out(seconds, nanos, deliver_ms):
    delay = message(message_type=v5.MessageType.DELAY)
    stamp = delay.system_properties.delivery_timestamp
    stamp.seconds, stamp.nanos = seconds, nanos
    stored = v5_messages.incoming(delay, 1024, explicit_queue=False)
    assert stored.properties[properties.TIMER_DELIVER_MS] == str(deliver_ms)
    out = messages.outgoing(StoredMessage("T", 0, 0, 0, 0, 0, 0, 0, "h", 0, "s", 0, stored.properties, b"x"))
    assert (out.system_properties.delivery_timestamp.ToMilliseconds(), out.system_properties.message_type) == (
        deliver_ms, v5.MessageType.DELAY)
    assert properties.TIMER_DELIVER_MS not in out.user_properties


def test_a_transactional_message_is_marked_and_takes_no_delivery_time():
    stored = v5_messages.incoming(message(message_type=v5.MessageType.TRANSACTION), 1024, explicit_queue=False)
    assert stored.properties[properties.TRANSACTION] == "true"
    both = message(message_type=v5.MessageType.TRANSACTION)
    both.system_properties.delivery_timestamp.seconds = 1
    rejected(both, Error.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE)


def test_a_fifo_message_carries_its_group_in_and_out():
    fifo = message(message_type=v5.MessageType.FIFO, message_group="order-7")
    stored = v5_messages.incoming(fifo, 1024, explicit_queue=False)
    assert stored.properties[properties.MESSAGE_GROUP] == "order-7"
    out = messages.outgoing(StoredMessage("T", 0, 0, 0, 0, 0, 0, 0, "h", 0, "s", 0, stored.properties, b"x"))
    assert (out.system_properties.message_group, out.system_properties.message_type) == (
        "order-7", v5.MessageType.FIFO)
    assert "message_group" not in out.user_properties and properties.MESSAGE_GROUP not in out.user_properties
    # The type is the properties': a FIFO type without a group is a NORMAL message (the topic's check refuses it).
    assert properties.MESSAGE_GROUP not in v5_messages.incoming(message(message_type=v5.MessageType.FIFO), 1024,
                                                             False).properties
    for group in (" ", "a\tb", "g\x7f", "x" * (limits.MESSAGE_GROUP_LENGTH_MAX + 1)):
        rejected(message(message_group=group), Error.ILLEGAL_MESSAGE_GROUP)
    assert v5_messages.incoming(message(message_group="é" * limits.MESSAGE_GROUP_LENGTH_MAX), 1024, False)


def test_names():
    assert v5_protocol.topic_name(v5.Resource(name="a%b|c_d-1")) == "a%b|c_d-1"
    assert v5_protocol.topic_name(v5.Resource(resource_namespace="ns", name="T")) == "ns%T"
    for bad in ("", "a b", "x" * (limits.NAME_LENGTH_MAX + 1), "é"):
        with pytest.raises(QuorumqError) as caught:
            v5_protocol.topic_name(v5.Resource(name=bad))
        assert caught.value.error is Error.ILLEGAL_TOPIC


def test_tag_filter():
    assert messages.tag_filter(v5.FilterExpression(type=v5.FilterType.TAG, expression="*")) is None
    assert messages.tag_filter(v5.FilterExpression(type=v5.FilterType.TAG, expression="a || b")) == {"a", "b"}
    with pytest.raises(QuorumqError):
        messages.tag_filter(v5.FilterExpression(type=v5.FilterType.SQL, expression="a > 1"))


def largest_answer(props: dict[str, str], body_bytes: int) -> int:
    """The answer size of a stored message with these properties and every other field at its longest."""
    assert len(codec.encode_properties(props)) <= limits.PROPERTIES_BYTES_MAX
    host = "h" * limits.HOST_LENGTH_MAX
    stored = StoredMessage(
        topic="%".join(["n" * limits.NAME_LENGTH_MAX] * 2), queue_id=limits.QUEUES_PER_TOPIC_MAX - 1,
        queue_offset=2**63 - 1, commit_log_offset=0, store_size=0, flag=0, sys_flag=0,
        born_timestamp_ms=2**62, born_host=host, store_timestamp_ms=2**62, store_host=host, reconsume_times=0,
        properties=props, body=b"x" * body_bytes)
    message = messages.outgoing(stored, delivery_attempt=2**31 - 1)
    message.system_properties.receipt_handle = encode_handle(limits.QUEUES_PER_TOPIC_MAX - 1, 2**63 - 1, 2**63 - 1)
    message.system_properties.invisible_duration.FromSeconds(int(limits.INVISIBLE_SECONDS_MAX))
    size = messages.answer_bytes(message)
    assert size == v5s.ReceiveMessageResponse(message=message).ByteSize()
    return size


def tiny_pairs() -> dict[str, str]:
    """As many pairs as the encoded properties hold: hex names, empty values."""
    props, size = {}, 0
    while size + len(f"{len(props):x}") + 2 <= limits.PROPERTIES_BYTES_MAX:
        size += len(f"{len(props):x}") + 2
        props[f"{len(props):x}"] = ""
    return props


# The worst shapes for the answer: the most pairs (tiny ones), the most keys (empty ones), one
# huge value, and what the official client can send at most (127 user properties, tag, 32 keys).
WORST_PROPERTIES = {
    "tiny pairs": tiny_pairs(),
    "empty keys": {properties.KEYS: " " * (limits.PROPERTIES_BYTES_MAX - 7)},
    "one value": {"k": "v" * (limits.PROPERTIES_BYTES_MAX - 4)},
    "client maximum": {properties.MESSAGE_ID: "I" * 255, properties.TAGS: "T" * limits.TAG_LENGTH_MAX,
                       properties.KEYS: " ".join(["K" * 254] * limits.KEYS_PER_MESSAGE_MAX),
                       **{f"{index:03d}": "v" * 180 for index in range(127)}},
}


@pytest.mark.parametrize("shape", sorted(WORST_PROPERTIES))
def test_the_default_body_size_fits_a_receive_answer_with_the_largest_properties(shape):
    # The bound behind maxMessageSize's default: properties at most 3 bytes per stored byte, the
    # other fields within ANSWER_FIELDS_BYTES_MAX.
    props = WORST_PROPERTIES[shape]
    bare = largest_answer({}, limits.MESSAGE_BODY_BYTES_DEFAULT)
    assert bare - limits.MESSAGE_BODY_BYTES_DEFAULT <= limits.ANSWER_FIELDS_BYTES_MAX // 2
    size = largest_answer(props, limits.MESSAGE_BODY_BYTES_DEFAULT)
    assert size - bare <= 3 * len(codec.encode_properties(props))
    assert size <= limits.RECEIVE_ANSWER_BYTES_MAX


def test_the_old_default_of_4_mib_did_not_fit():
    assert largest_answer({properties.MESSAGE_ID: "I" * 36}, 4 * limits.MiB) > limits.RECEIVE_ANSWER_BYTES_MAX
