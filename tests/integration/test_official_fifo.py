"""FIFO topics and subscription groups through the official RocketMQ 5 Python client: a FIFO
producer's sends land on their message group's queue, a send of the wrong type is refused by the
broker itself (not only by the client's own check), and a consumer of a configured group gets the
group's FIFO flag, attempts and back-off in its Telemetry settings."""

import uuid

import grpc
import pytest
from rocketmq import FilterExpression, SimpleConsumer
from rocketmq.grpc_protocol import definition_pb2 as v5
from rocketmq.grpc_protocol import service_pb2 as v5s
from rocketmq.grpc_protocol import service_pb2_grpc as v5_grpc

from harness import THROUGH_PROXY, check_for, new_name, official_message, receive_all, telemetry_settings, typed_topic
from quorumq.broker.consumers import decode_handle
from quorumq.client import Blocking, Message, Producer
from quorumq.cluster import cluster_pb2 as pb
from quorumq.core.message_types import fifo_queue
from quorumq.core.proxy_handles import unwrap
from quorumq.core.subscription import EXPONENTIAL, RetryPolicy, SubscriptionGroup
from quorumq.protocol.configs import group_to_pb


@pytest.fixture(scope="module")
def stub(masters):
    with grpc.insecure_channel(masters[0]) as channel:
        yield v5_grpc.MessagingServiceStub(channel)


def fifo_message(topic: str, body: bytes, group: str):
    message = official_message(topic, body)
    message.message_group = group
    return message


def stored_queue(message) -> int:
    """The queue a received message was stored on, named by its receipt handle (which a proxy
    prefixes with its broker group's name)."""
    return decode_handle(unwrap(message.receipt_handle)[1] if THROUGH_PROXY else message.receipt_handle)[0]


def raw_send(stub, topic: str, group: str | None) -> v5s.SendMessageResponse:
    """A send as the official clients build it, but without their local type check."""
    system = v5.SystemProperties(message_id=uuid.uuid4().hex, body_encoding=v5.Encoding.IDENTITY,
                                 message_type=v5.MessageType.FIFO if group else v5.MessageType.NORMAL)
    if group:
        system.message_group = group
    message = v5.Message(topic=v5.Resource(name=topic), body=b"typed", system_properties=system)
    return stub.SendMessage(v5s.SendMessageRequest(messages=[message]), timeout=10)


def test_a_fifo_send_is_send_ok_on_its_groups_queue_and_delivered_with_its_group(client_config, producer, admin,
                                                                                 masters):
    topic = typed_topic(admin, masters, "FIFO")
    route = admin.route(topic)
    assert [q.message_type for q in route.queues] == [pb.FIFO]
    consumer = SimpleConsumer(client_config, new_name("G"), {topic: FilterExpression("*")}, await_duration=2)
    consumer.startup()
    try:
        sent = {}
        for index in range(12):
            group = f"order-{index % 3}"
            receipt = producer.send(fifo_message(topic, f"{group}:{index}".encode(), group))
            sent[receipt.message_id] = group
        received = receive_all(consumer, len(sent))
        assert {m.message_id: m.message_group for m in received} == sent
        # One group, one queue: the broker's choice over the topic's 4 write queues (the receipt
        # handle names the queue a message was stored on).
        assert {(m.message_group, stored_queue(m)) for m in received} == {
            (group, fifo_queue(group, 4)) for group in set(sent.values())}
        for message in received:
            consumer.ack(message)
    finally:
        consumer.shutdown()


def test_a_send_of_the_wrong_type_is_refused_by_the_broker_and_stores_nothing(shared_cluster, producer, admin,
                                                                              masters, stub):
    fifo, normal = typed_topic(admin, masters, "FIFO", queues=1), typed_topic(admin, masters, "NORMAL", queues=1)
    conflict = v5.Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
    for topic, group in ((normal, "order-1"), (fifo, None)):
        response = raw_send(stub, topic, group)
        assert response.status.code == conflict, response.status
    assert raw_send(stub, fifo, "order-1").status.code == v5.Code.OK
    with pytest.raises(Exception, match="message type"):  # the official client's own check, from the route
        producer.send(official_message(fifo, b"normal"))
    progress = {topic: [q.max_offset for p in admin.consumer_progress("nobody", topic) for q in p.queues]
                for topic in (fifo, normal)}
    assert progress == {fifo: [1], normal: [0]}, "only the FIFO message to the FIFO topic is stored"
    # quorumq's own client: a message group to a FIFO topic, and the broker's refusal of a NORMAL one.
    with Blocking(Producer, shared_cluster["access_point"]) as own:
        ok, refused = own.send_batch(fifo, [Message(b"own", message_group="order-2"), Message(b"plain")])
    assert ok.ok and ok.queue_id == 0 and refused.status == "MESSAGE_PROPERTY_CONFLICT_WITH_TYPE"


def test_a_consumer_gets_its_groups_fifo_flag_attempts_and_back_off(client_config, admin, masters):
    group, topic = new_name("G"), typed_topic(admin, masters, "FIFO", queues=1)
    admin.update_subscription_group(masters, group_to_pb(SubscriptionGroup(
        group, consume_message_orderly=True, retry_max_times=3,
        retry_policy=RetryPolicy(EXPONENTIAL, initial_ms=2000, max_ms=60_000, multiplier=3))))

    class Recording(SimpleConsumer):
        settings = None

        def reset_setting(self, settings):
            Recording.settings = settings
            super().reset_setting(settings)

    consumer = Recording(client_config, group, {topic: FilterExpression("*")}, await_duration=2)
    consumer.startup()
    try:
        settings = check_for(10, 0.1, lambda: Recording.settings, "the settings reply")
    finally:
        consumer.shutdown()
    subscription, backoff = settings.subscription, settings.backoff_policy
    assert (subscription.fifo, subscription.receive_batch_size, subscription.long_polling_timeout.seconds) == (
        True, 32, 2), "the client's own long poll is kept"
    assert backoff.max_attempts == 4
    exponential = backoff.exponential_backoff
    assert (exponential.initial.ToMilliseconds(), exponential.max.ToMilliseconds(), exponential.multiplier) == (
        2000, 60_000, 3)

    admin.delete_subscription_group(masters, group)  # the defaults: not FIFO, 17 attempts, RocketMQ's list
    reply = telemetry_settings(masters[0], group)
    assert (reply.subscription.fifo, reply.backoff_policy.max_attempts) == (False, 17)
    assert [d.ToMilliseconds() for d in reply.backoff_policy.customized_backoff.next][:4] == [1000, 5000, 10000, 30000]


def test_a_group_that_may_not_consume_is_refused_its_receives(admin, masters, stub):
    group, topic = new_name("G"), typed_topic(admin, masters, "NORMAL", queues=1)
    admin.update_subscription_group(masters, group_to_pb(SubscriptionGroup(group, consume_enable=False)))
    request = v5s.ReceiveMessageRequest(group=v5.Resource(name=group), batch_size=1, auto_renew=False,
                                        message_queue=v5.MessageQueue(topic=v5.Resource(name=topic), id=-1),
                                        filter_expression=v5.FilterExpression(type=v5.FilterType.TAG, expression="*"))
    request.invisible_duration.FromSeconds(10)
    request.long_polling_timeout.FromSeconds(1)
    [answer] = list(stub.ReceiveMessage(request, timeout=10))
    assert answer.status.code == v5.Code.FORBIDDEN and "consumeEnable" in answer.status.message
