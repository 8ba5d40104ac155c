"""What the v5 endpoint accepts from a producer, and the stable error for each rule it breaks."""

import pytest
from rocketmq.grpc_protocol import definition_pb2 as v5

from quorumq import limits
from quorumq.endpoint import messages
from quorumq.errors import Error, QuorumqError


def message(**system):
    body = system.pop("body", b"hello")
    user = system.pop("user", {})
    system.setdefault("message_type", v5.MessageType.NORMAL)
    props = v5.SystemProperties(message_id="ID1", **system)
    return v5.Message(topic=v5.Resource(name="T"), body=body, user_properties=user, system_properties=props)


def rejected(msg, error):
    with pytest.raises(QuorumqError) as caught:
        messages.incoming(msg, max_body_bytes=1024, explicit_queue=False)
    assert caught.value.error is error
    return str(caught.value)


def test_a_good_message_as_the_store_takes_it():
    good = message(tag="TagA", keys=["k1", "k2"], user={"a": "b"}, queue_id=3, born_host="10.0.0.1")
    good.system_properties.born_timestamp.FromMilliseconds(1234567)
    stored = messages.incoming(good, 1024, explicit_queue=True)
    assert stored.properties == {"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "ID1", "a": "b"}
    assert (stored.topic, stored.queue_id, stored.body, stored.born_timestamp_ms, stored.born_host) == (
        "T", 3, b"hello", 1234567, "10.0.0.1")
    assert messages.incoming(good, 1024, explicit_queue=False).queue_id == -1, "the broker picks the queue"


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


@pytest.mark.parametrize("kind", [v5.MessageType.FIFO, v5.MessageType.DELAY, v5.MessageType.TRANSACTION])
def test_message_types_not_built_yet_are_refused(kind):
    assert "not supported yet" in rejected(message(message_type=kind), Error.MESSAGE_TYPE_UNSUPPORTED)


def test_names():
    assert messages.topic_name(v5.Resource(name="a%b|c_d-1")) == "a%b|c_d-1"
    assert messages.topic_name(v5.Resource(resource_namespace="ns", name="T")) == "ns%T"
    for bad in ("", "a b", "x" * (limits.NAME_LENGTH_MAX + 1), "é"):
        with pytest.raises(QuorumqError) as caught:
            messages.topic_name(v5.Resource(name=bad))
        assert caught.value.error is Error.ILLEGAL_TOPIC


def test_tag_filter():
    assert messages.tag_filter(v5.FilterExpression(type=v5.FilterType.TAG, expression="*")) is None
    assert messages.tag_filter(v5.FilterExpression(type=v5.FilterType.TAG, expression="a || b")) == {"a", "b"}
    with pytest.raises(QuorumqError):
        messages.tag_filter(v5.FilterExpression(type=v5.FilterType.SQL, expression="a > 1"))
