"""Subscription groups and topic message types: RocketMQ's defaults, the mqadmin JSON of a retry
policy, what a topic of each type takes, a message's type from its properties and a FIFO message's
queue; bad input gets its catalogue error; a broker keeps the configured groups."""

import hashlib
import json

import pytest
from test_store_support import ManualClock

from quorumq import limits
from quorumq.broker.consumers import ConsumerGroups
from quorumq.config import Config, Kind
from quorumq.core import codec, properties
from quorumq.core.dead_letters import dead_letter_topic
from quorumq.core.message_rules import check_name
from quorumq.core.message_types import (
    ACCEPTED,
    TopicMessageType,
    check_message_type,
    fifo_queue,
    message_type,
    parse_attributes,
    parse_message_type,
)
from quorumq.core.subscription import (
    CUSTOMIZED,
    DEFAULT_RETRY_POLICY,
    EXPONENTIAL,
    RetryPolicy,
    SubscriptionGroup,
    group_data,
    group_from_data,
    parse_bool,
    parse_retry_max_times,
    retry_policy_from_json,
)
from quorumq.errors import Error, QuorumqError
from quorumq.store import MemoryStore

T = TopicMessageType


def error_of(function, *args, **kwargs) -> Error:
    with pytest.raises(QuorumqError) as caught:
        function(*args, **kwargs)
    return caught.value.error


def test_a_group_never_configured_has_rocketmqs_defaults():
    group = SubscriptionGroup("orders")
    assert (group.consume_enable, group.consume_message_orderly, group.retry_max_times) == (True, False, 16)
    assert group.max_attempts == 17
    assert group.retry_policy is DEFAULT_RETRY_POLICY and group.retry_policy.kind == CUSTOMIZED
    seconds = [1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200]
    assert group.retry_policy.next_ms == tuple(s * 1000 for s in seconds)


def test_mqadmins_policy_json_round_trips_through_a_group():
    for text, policy in (
        ('{"type":"EXPONENTIAL","exponentialRetryPolicy":{"initial":5000,"max":7200000,"multiplier":2}}',
         RetryPolicy(EXPONENTIAL, initial_ms=5000, max_ms=7_200_000, multiplier=2.0)),
        ('{"type":"CUSTOMIZED","customizedRetryPolicy":{"next":[1000,5000,10000]}}',
         RetryPolicy(CUSTOMIZED, next_ms=(1000, 5000, 10000))),
        ('{"type":"EXPONENTIAL"}', RetryPolicy(EXPONENTIAL)),  # left out: RocketMQ's defaults
        ('{"type":"CUSTOMIZED","customizedRetryPolicy":null,"exponentialRetryPolicy":null}', DEFAULT_RETRY_POLICY),
        ("{}", DEFAULT_RETRY_POLICY),
    ):
        assert retry_policy_from_json(text) == policy
        group = SubscriptionGroup("g", consume_enable=False, consume_message_orderly=True, retry_max_times=3,
                                  retry_policy=policy)
        assert group_from_data(json.loads(json.dumps(group_data(group)))) == group
    assert group_data(SubscriptionGroup("g", retry_policy=retry_policy_from_json('{"type":"EXPONENTIAL"}'))) == {
        "groupName": "g", "consumeEnable": True, "consumeMessageOrderly": False, "retryMaxTimes": 16,
        "groupRetryPolicy": {"type": "EXPONENTIAL",
                             "exponentialRetryPolicy": {"initial": 5000, "max": 7200000, "multiplier": 2}}}


@pytest.mark.parametrize("text", [
    "not json", '{"type":"LINEAR"}', '{"type":"customized"}', "[]", '{"kind":"CUSTOMIZED"}',
    '{"type":"CUSTOMIZED","customizedRetryPolicy":{"next":[]}}',
    '{"type":"CUSTOMIZED","customizedRetryPolicy":{"next":[500]}}',  # below the 1 s invisible time
    '{"type":"CUSTOMIZED","customizedRetryPolicy":{"next":[1000.5]}}',
    '{"type":"CUSTOMIZED","customizedRetryPolicy":{"next":"1000"}}',
    '{"type":"CUSTOMIZED","customizedRetryPolicy":{"next":[' + ",".join(["1000"] * 65) + "]}}",
    '{"type":"EXPONENTIAL","exponentialRetryPolicy":{"initial":5000,"max":1000}}',
    '{"type":"EXPONENTIAL","exponentialRetryPolicy":{"multiplier":0.5}}',
    '{"type":"EXPONENTIAL","exponentialRetryPolicy":{"multiplier":true}}',
    '{"type":"EXPONENTIAL","exponentialRetryPolicy":{"initial":5000,"max":86400000}}',  # over 12 h
    '{"type":"EXPONENTIAL","exponentialRetryPolicy":{"start":5000}}',
])
def test_a_bad_retry_policy_is_refused(text):
    assert error_of(retry_policy_from_json, text) is Error.ILLEGAL_RETRY_POLICY


def test_retry_max_times_is_0_to_64():
    assert SubscriptionGroup("g", retry_max_times=0).max_attempts == 1
    assert SubscriptionGroup("g", retry_max_times=64).max_attempts == 65
    assert parse_retry_max_times(" 7 ") == 7
    for bad in ("-1", "65", "x", "1.5"):
        assert error_of(parse_retry_max_times, bad) is Error.ILLEGAL_RETRY_MAX_TIMES
    for value in (-1, 65, True):
        assert error_of(SubscriptionGroup, "g", retry_max_times=value) is Error.ILLEGAL_RETRY_MAX_TIMES
    assert error_of(group_from_data, {"groupName": "g", "retryMaxTimes": 65}) is Error.ILLEGAL_RETRY_MAX_TIMES


def test_a_group_needs_a_legal_name_and_known_fields():
    assert error_of(SubscriptionGroup, "bad name") is Error.ILLEGAL_CONSUMER_GROUP
    check_name("G" * limits.NAME_LENGTH_MAX, Error.ILLEGAL_TOPIC, "topic")  # a legal topic name...
    assert error_of(SubscriptionGroup, "G" * limits.NAME_LENGTH_MAX) is Error.ILLEGAL_CONSUMER_GROUP, \
        "... is too long for a group: its DLQ topic would not be a legal name"
    longest = SubscriptionGroup("G" * limits.GROUP_NAME_LENGTH_MAX)
    check_name(dead_letter_topic(longest.name), Error.ILLEGAL_TOPIC, "topic")
    assert error_of(group_from_data, {"groupName": "g", "brokerId": 0}) is Error.BAD_REQUEST
    assert error_of(group_from_data, {"groupName": "g", "consumeEnable": "yes"}) is Error.BAD_REQUEST
    assert (parse_bool("TRUE", "-s"), parse_bool("false", "-o")) == (True, False)
    assert error_of(parse_bool, "yes", "-s") is Error.BAD_REQUEST


def test_what_a_topic_of_each_type_takes():
    assert ACCEPTED[T.NORMAL] == (T.NORMAL,) and ACCEPTED[T.FIFO] == (T.FIFO,)
    assert ACCEPTED[T.DELAY] == (T.DELAY,) and ACCEPTED[T.TRANSACTION] == (T.TRANSACTION,)
    assert ACCEPTED[T.MIXED] == (T.NORMAL, T.FIFO, T.DELAY, T.TRANSACTION)
    assert ACCEPTED[T.UNSPECIFIED] == ()
    fifo = {properties.MESSAGE_GROUP: "order-1"}
    check_message_type("t", T.FIFO, fifo)
    check_message_type("t", T.MIXED, fifo)
    check_message_type("t", T.NORMAL, {})
    for topic_type, props in ((T.NORMAL, fifo), (T.FIFO, {}), (T.UNSPECIFIED, {})):
        assert error_of(check_message_type, "t", topic_type, props) is Error.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE


def test_a_messages_type_comes_from_its_properties():
    assert message_type({properties.TAGS: "a"}) is T.NORMAL
    assert message_type({properties.MESSAGE_GROUP: "g"}) is T.FIFO
    assert message_type({"TIMER_DELIVER_MS": "1", properties.MESSAGE_GROUP: "g"}) is T.DELAY
    assert message_type({"TRAN_MSG": "true", "DELAY": "3"}) is T.TRANSACTION
    assert message_type({"TRAN_MSG": "false"}) is T.NORMAL
    assert properties.MESSAGE_GROUP in properties.RESERVED


def test_topic_attributes_take_rocketmqs_syntax():
    assert parse_attributes("+message.type=FIFO") == {"message.type": "FIFO"}
    assert parse_attributes("-message.type") == {"message.type": None}
    assert parse_message_type("MIXED") is T.MIXED
    for bad in ("+message.type=fifo", "+message.type=UNSPECIFIED", "message.type=FIFO", "+message.type",
                "-message.type=FIFO", "+retention=3", "", "+message.type=FIFO,-message.type"):
        assert error_of(parse_attributes, bad) is Error.ILLEGAL_TOPIC_ATTRIBUTE


def test_a_message_group_has_one_queue_for_a_queue_count():
    assert fifo_queue("order-1", 8) == fifo_queue("order-1", 8)
    # The official Python client's hash (queue_selector.py select_queue_by_hash_key).
    assert fifo_queue("order-1", 8) == int(hashlib.sha256(b"order-1").hexdigest(), 16) % 8
    assert {fifo_queue(f"g{number}", 8) for number in range(100)} == set(range(8))


def test_a_producers_records_show_their_properties():
    records = bytearray(2048)
    view = memoryview(records)
    position = 0
    for props in ({"UNIQ_KEY": "1"}, {"UNIQ_KEY": "2", properties.MESSAGE_GROUP: "g"}):
        encoded = codec.encode_properties(props)
        size = codec.record_size(b"T", b"h", encoded, b"body")
        codec.encode_record(view, position, size, b"T", 0, 0, 0, 0, b"h", 0, encoded, b"body")
        position += size
    assert codec.records_properties(bytes(records[:position]), 2) == [
        {"UNIQ_KEY": "1"}, {"UNIQ_KEY": "2", properties.MESSAGE_GROUP: "g"}]
    for count, cut in ((3, position), (2, position - 1)):
        with pytest.raises(ValueError):
            codec.records_properties(bytes(records[:cut]), count)


def test_subscription_groups_persist_and_a_slave_adopts_its_masters(tmp_path):
    def consumers():
        return ConsumerGroups(MemoryStore(clock=ManualClock()), tmp_path, ManualClock(), Config(Kind.BROKER, {}),
                              lambda: None)

    groups = consumers()
    fifo = SubscriptionGroup("orders", consume_message_orderly=True, retry_max_times=3,
                             retry_policy=RetryPolicy(EXPONENTIAL, initial_ms=2000))
    groups.set_subscription(fifo)
    groups.set_subscription(SubscriptionGroup("audit", consume_enable=False))
    assert "orders" in groups.groups, "a configured group is known from then on"
    again = consumers()
    assert again.group("orders") == fifo and again.configured("orders")
    assert again.group("never") == SubscriptionGroup("never") and not again.configured("never")
    again.adopt_subscriptions([SubscriptionGroup("orders")])
    third = consumers()
    assert [group.name for group in third.subscriptions()] == ["orders"] and third.group("orders").max_attempts == 17
    assert third.delete_subscription("orders") and not third.delete_subscription("orders")
    assert consumers().subscriptions() == []
