"""The official Python client through `quorumq proxy` in front of a broker group of three replicas
that acknowledges a send once two hold it (SYNC_MASTER, inSyncReplicas 2): the client reaches the
proxies alone (two, on one port: `quorumq up --proxies 2`), and its sends, receives, acks and
invisible-duration changes reach the brokers."""

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
)
from quorumq.client import AdminClient, Blocking
from quorumq.core.subscription import SubscriptionGroup
from quorumq.protocol.configs import group_to_pb


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A 3-replica group with inSyncReplicas 2 and two proxies routing through its name server."""
    cluster = LocalCluster(tmp_path_factory.mktemp("proxy"), replicas=3, proxies=2,
                           sets={"brokerRole": "SYNC_MASTER", "inSyncReplicas": "2"})
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
