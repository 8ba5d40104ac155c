"""A dead letter's copy (core/dead_letters.py): RocketMQ's origin properties, the attempts it had,
and room for them in every message the broker accepts."""

from rocketmq.grpc_protocol import definition_pb2 as v5

from quorumq import limits
from quorumq.core import codec, properties
from quorumq.core.codec import StoredMessage
from quorumq.core.dead_letters import dead_letter_properties, dead_letter_topic, is_dead_letter_topic
from quorumq.core.message_rules import stored_properties
from quorumq.endpoint.messages import outgoing
from quorumq.protocol.v5 import resource, resource_name


def test_copy_keeps_the_message_and_names_its_origin_and_attempts():
    props = {properties.MESSAGE_ID: "ID1", properties.TAGS: "red", "k": "v"}
    copied = dead_letter_properties(props, "T", attempts=3)
    assert copied == {**props, "RETRY_TOPIC": "T", "ORIGIN_MESSAGE_ID": "ID1", "DLQ_ORIGIN_TOPIC": "T",
                      "DLQ_ORIGIN_MESSAGE_ID": "ID1", "RECONSUME_TIME": "3"}
    assert props == {properties.MESSAGE_ID: "ID1", properties.TAGS: "red", "k": "v"}, "the original is unchanged"


def test_copy_dead_lettered_again_keeps_the_first_origin():
    first = dead_letter_properties({properties.MESSAGE_ID: "ID1"}, "T", attempts=2)
    again = dead_letter_properties(first, dead_letter_topic("G"), attempts=5)
    assert again["DLQ_ORIGIN_TOPIC"] == again["RETRY_TOPIC"] == "T"
    assert again["RECONSUME_TIME"] == "5"


def test_dead_letter_topic_names():
    assert dead_letter_topic("G1") == "%DLQ%G1"
    assert is_dead_letter_topic("%DLQ%G1") and not is_dead_letter_topic("G1")


def test_producers_may_not_set_the_dead_letter_names_and_consumers_read_the_origin():
    names = {"RETRY_TOPIC", "ORIGIN_MESSAGE_ID", "DLQ_ORIGIN_TOPIC", "DLQ_ORIGIN_MESSAGE_ID", "RECONSUME_TIME"}
    assert names <= properties.RESERVED
    assert properties.SHOWN == {"DLQ_ORIGIN_TOPIC", "DLQ_ORIGIN_MESSAGE_ID", "RECONSUME_TIME"}


def test_copy_of_the_largest_accepted_properties_still_fits_a_record():
    user_room = limits.PROPERTIES_BYTES_MAX - limits.RESERVED_PROPERTIES_BYTES_MAX
    user = {"k": "v" * (user_room - 3)}
    keys = ["k" * limits.KEY_LENGTH_MAX] * limits.KEYS_PER_MESSAGE_MAX
    stored = stored_properties("i" * limits.KEY_LENGTH_MAX, user, "t" * limits.TAG_LENGTH_MAX, keys, gzip=True)
    copied = dead_letter_properties(stored, "T" * limits.NAME_LENGTH_MAX, attempts=65)
    added = len(codec.encode_properties(copied)) - len(codec.encode_properties(stored))
    assert added <= 856 <= limits.DEAD_LETTER_PROPERTIES_BYTES_MAX
    assert len(codec.encode_properties(copied)) <= limits.PROPERTIES_BYTES_MAX


def test_a_dead_letter_topic_is_one_v5_resource_name_and_comes_back_whole():
    assert resource("%DLQ%G1") == v5.Resource(name="%DLQ%G1")
    assert resource("ns%T") == v5.Resource(resource_namespace="ns", name="T")
    assert resource("%DLQ%ns%G1") == v5.Resource(resource_namespace="ns", name="%DLQ%G1")
    for name in ("%DLQ%G1", "%DLQ%ns%G1", "ns%T", "T"):
        assert resource_name(resource(name)) == name


def test_a_delivered_copy_carries_its_origin_in_the_v5_field_and_among_its_properties():
    props = dead_letter_properties({properties.MESSAGE_ID: "ID1", properties.MESSAGE_GROUP: "g", "k": "v"}, "T", 3)
    delivered = outgoing(StoredMessage("%DLQ%G", 0, 0, 0, 0, 0, 0, 0, "h", 0, "s", 3, props, b"x"))
    assert delivered.topic == v5.Resource(name="%DLQ%G")
    assert delivered.system_properties.dead_letter_queue == v5.DeadLetterQueue(topic="T", message_id="ID1")
    assert delivered.system_properties.message_id == "ID1" and delivered.system_properties.message_group == "g"
    assert dict(delivered.user_properties) == {"k": "v", "DLQ_ORIGIN_TOPIC": "T", "DLQ_ORIGIN_MESSAGE_ID": "ID1",
                                               "RECONSUME_TIME": "3"}
    plain = outgoing(StoredMessage("T", 0, 0, 0, 0, 0, 0, 0, "h", 0, "s", 0, {properties.MESSAGE_ID: "ID1"}, b"x"))
    assert not plain.system_properties.HasField("dead_letter_queue")
