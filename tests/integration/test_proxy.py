"""The official Python client through `quorumq proxy` in front of a broker group of three replicas
that acknowledges a send once two hold it (SYNC_MASTER, inSyncReplicas 2): the client reaches the
proxies alone (two, on one port: `quorumq up --proxies 2`), and its sends, receives, acks and
invisible-duration changes reach the brokers. The proxies send unsigned sends as records
(SendBatch), answered as the broker answers them direct."""

import time
import uuid

import grpc
import pytest
from rocketmq import ClientConfiguration, Credentials
from rocketmq.grpc_protocol import definition_pb2 as v5
from rocketmq.grpc_protocol import service_pb2 as v5s
from rocketmq.grpc_protocol import service_pb2_grpc as v5_grpc

from harness import (
    LocalCluster,
    new_name,
    official_message,
    pid_alive,
    receive_all,
    send_sync_and_async,
    simple_consumer,
    started_producer,
    telemetry_settings,
    typed_topic,
    v5_message,
)
from quorumq.client import AdminClient, Blocking
from quorumq.core.subscription import SubscriptionGroup
from quorumq.errors import Error
from quorumq.protocol.configs import group_to_pb
from quorumq.protocol.wire_errors import v5_code

MAX_BODY_BYTES = 64 * 1024


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A 3-replica group with inSyncReplicas 2 and two proxies routing through its name server."""
    cluster = LocalCluster(tmp_path_factory.mktemp("proxy"), replicas=3, proxies=2,
                           sets={"brokerRole": "SYNC_MASTER", "inSyncReplicas": "2",
                                 "maxMessageSize": str(MAX_BODY_BYTES)})
    try:
        yield cluster.start()
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def proxy(cluster):
    return {"address": cluster["proxy_access_point"]}


@pytest.fixture(scope="module")
def client_config(proxy):
    return ClientConfiguration(proxy["address"], Credentials(), request_timeout=5)


def test_routes_name_the_proxy_alone(proxy):
    topic = f"T{uuid.uuid4().hex[:8]}"
    with grpc.insecure_channel(proxy["address"]) as channel:
        response = v5_grpc.MessagingServiceStub(channel).QueryRoute(
            v5s.QueryRouteRequest(topic=v5.Resource(name=topic)), timeout=10)
    assert response.status.code == v5.Code.OK
    addresses = {f"{a.host}:{a.port}" for q in response.message_queues for a in q.broker.endpoints.addresses}
    assert addresses == {proxy["address"]}
    assert len({(q.broker.name, q.id) for q in response.message_queues}) == len(response.message_queues)


def test_send_receive_ack_through_the_proxy(client_config):
    topic = f"T{uuid.uuid4().hex[:8]}"
    producer = started_producer(client_config)
    consumer = simple_consumer(client_config, "ProxyG1", topic)
    try:
        sent = send_sync_and_async(producer, topic, 15)
        received = receive_all(consumer, len(sent))
        assert {m.message_id: m.body for m in received} == sent
        for message in received:
            consumer.ack(message)
        assert consumer.receive(32, 30) == [], "acked messages must not come back"
    finally:
        consumer.shutdown()
        producer.shutdown()


def test_change_invisible_duration_through_the_proxy(client_config):
    topic = f"T{uuid.uuid4().hex[:8]}"
    producer = started_producer(client_config)
    consumer = simple_consumer(client_config, "ProxyG2", topic)
    try:
        producer.send(official_message(topic, b"nack-me"))
        [message] = receive_all(consumer, 1, invisible_s=60)
        consumer.change_invisible_duration(message, 1)
        [again] = receive_all(consumer, 1, invisible_s=60, timeout_s=15)
        assert (again.body, again.delivery_attempt) == (b"nack-me", 2)
        consumer.ack(again)
        assert consumer.receive(32, 30) == []
    finally:
        consumer.shutdown()
        producer.shutdown()


def test_up_runs_each_proxy_on_the_one_port(cluster):
    proxies = [p for p in cluster["processes"] if p["kind"] == "proxy"]
    assert len(proxies) == 2 and all(pid_alive(p["pid"]) for p in proxies)
    assert {p["address"] for p in proxies} == {cluster["proxy_access_point"]}


def test_a_consumer_gets_its_groups_config_through_the_proxy(cluster, proxy):
    group, topic = new_name("G"), new_name("T")
    with Blocking(AdminClient, cluster["access_point"]) as admin:
        masters = [broker.address for broker in admin.brokers(masters_only=True)]
        admin.update_subscription_group(masters, group_to_pb(SubscriptionGroup(
            group, consume_message_orderly=True, retry_max_times=3)))
    reply = telemetry_settings(proxy["address"], group, topic)
    assert (reply.subscription.fifo, reply.backoff_policy.max_attempts) == (True, 4)


@pytest.fixture(scope="module")
def admin(cluster):
    with Blocking(AdminClient, cluster["access_point"]) as admin:
        yield admin


@pytest.fixture(scope="module")
def masters(admin):
    return [broker.address for broker in admin.brokers(masters_only=True)]


def test_messages_keep_every_field_through_the_proxy(client_config, admin, masters):
    """Tag, keys, user properties and a FIFO message's group go as records, a delay message as v5:
    the consumer reads each as sent."""
    topic = typed_topic(admin, masters, "MIXED")
    producer = started_producer(client_config)
    consumer = simple_consumer(client_config, new_name("G"), topic)
    try:
        tagged = official_message(topic, b"tagged", tag="T1", keys="k1")
        tagged.add_property("color", "blue")
        fifo = official_message(topic, b"fifo", tag="T2")
        fifo.message_group = "order-7"
        delayed = official_message(topic, b"delayed")
        due_ms = int(time.time() * 1000) + 1000
        delayed.delivery_timestamp = due_ms
        ids = {producer.send(message).message_id: message.body for message in (tagged, fifo, delayed)}
        received = {m.body: m for m in receive_all(consumer, 3)}
        assert {m.message_id: body for body, m in received.items()} == ids
        assert (received[b"tagged"].tag, received[b"tagged"].keys, received[b"tagged"].properties["color"]) == (
            "T1", {"k1"}, "blue")
        assert (received[b"fifo"].tag, received[b"fifo"].message_group) == ("T2", "order-7")
        assert received[b"delayed"].delivery_timestamp == due_ms
    finally:
        consumer.shutdown()
        producer.shutdown()


def _send(address: str, messages: list[v5.Message]) -> v5s.SendMessageResponse:
    with grpc.insecure_channel(address) as channel:
        return v5_grpc.MessagingServiceStub(channel).SendMessage(v5s.SendMessageRequest(messages=messages),
                                                                 timeout=10)


def _codes(response: v5s.SendMessageResponse) -> list:
    return [response.status.code] + [entry.status.code for entry in response.entries]


def test_a_message_the_broker_refuses_fails_alone_as_direct(client_config, proxy, admin, masters):
    """One request through the proxy and the same direct to the master: a body above maxMessageSize
    and, on a FIFO topic, a message without a group (the broker refuses the records' SendBatch, the
    proxy sends them again as v5) fail with the broker's codes, and the others are stored."""
    topic, fifo_topic = typed_topic(admin, masters, "NORMAL"), typed_topic(admin, masters, "FIFO")
    consumer = simple_consumer(client_config, new_name("G"), topic)
    try:
        stored = set()
        for address in (proxy["address"], masters[0]):
            messages = [v5_message(topic, b"first"), v5_message(topic, b"x" * (MAX_BODY_BYTES + 1)),
                        v5_message(topic, b"third")]
            response = _send(address, messages)
            assert _codes(response) == [v5.Code.MESSAGE_BODY_TOO_LARGE, v5.Code.OK,
                                        v5.Code.MESSAGE_BODY_TOO_LARGE, v5.Code.OK], address
            assert [entry.message_id for entry in response.entries] == [
                message.system_properties.message_id for message in messages]
            stored |= {messages[0].system_properties.message_id, messages[2].system_properties.message_id}
            grouped = v5_message(fifo_topic, b"grouped")
            grouped.system_properties.message_group = "g1"
            conflict = v5_code(Error.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE)
            assert _codes(_send(address, [grouped, v5_message(fifo_topic, b"no group")])) == [
                conflict, v5.Code.OK, conflict], address
        assert {m.message_id for m in receive_all(consumer, len(stored))} == stored
    finally:
        consumer.shutdown()
