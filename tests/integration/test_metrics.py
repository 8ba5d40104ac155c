"""Prometheus metrics as an operator scrapes them from every process `quorumq up` starts
(docs/observability.md): sends counted by status, consumer reads, and a slave's replication lag
while it is stopped and once it resumes."""

import asyncio
import os
import signal

import pytest

from harness import (
    LocalCluster,
    check_for,
    configuration,
    metric,
    official_message,
    scrape,
    simple_consumer,
    started_producer,
    v5_message,
    v5_send,
)
from quorumq.client import Message, Producer, PullConsumer

TOPIC = "Metered"
GROUP = "MeteredGroup"


@pytest.fixture(scope="module")
def replica_group(tmp_path_factory) -> dict:
    """A SYNC_MASTER that waits for its one slave (slaveTimeout 1 s, so a stopped slave costs little)."""
    cluster = LocalCluster(tmp_path_factory.mktemp("metrics"), replicas=2,
                           sets={"brokerRole": "SYNC_MASTER", "inSyncReplicas": "2", "slaveTimeout": "1000"})
    try:
        yield cluster.start()
    finally:
        cluster.stop()


def send_batch(cluster: dict, count: int) -> list[str]:
    async def send():
        async with Producer(cluster["access_point"]) as producer:
            results = await producer.send_batch(TOPIC, [Message(b"m" * 100)] * count, queue_id=0)
        return [result.status for result in results]
    return asyncio.run(send())


def test_every_process_is_scraped_and_sends_and_reads_are_counted(replica_group):
    namesrv, master, slave = replica_group["processes"]
    assert metric(scrape(namesrv), "quorumq_namesrv_brokers", cluster="DefaultCluster") == 2
    assert send_batch(replica_group, 30) == ["SEND_OK"] * 30  # SendBatch, quorumq's own client
    [entry] = v5_send(master["address"], v5_message(TOPIC, b"official")).entries  # the v5 SendMessage
    assert entry.status.code == 20000
    [refused] = v5_send(slave["address"], v5_message(TOPIC, b"to a slave")).entries
    assert refused.status.code != 20000

    on_master = scrape(master)
    labels = {"cluster": "DefaultCluster", "node_type": "broker", "node_id": "broker-a"}
    assert metric(on_master, "rocketmq_messages_in_total", topic=TOPIC, **labels) == 31
    assert metric(on_master, "rocketmq_throughput_in_total", topic=TOPIC) > 31 * 100
    assert metric(on_master, "rocketmq_message_size_count", topic=TOPIC) == 31
    assert metric(on_master, "quorumq_send_results_total", status="PUT_OK") == 31
    assert metric(on_master, "rocketmq_rpc_latency_count", request_code="SendBatch") >= 1
    assert metric(on_master, "rocketmq_topic_number") >= 1
    on_slave = scrape(slave)
    assert metric(on_slave, "quorumq_send_results_total", status="SERVICE_NOT_AVAILABLE") == 1
    assert metric(on_slave, "rocketmq_messages_in_total") == 0  # a slave stores copies, not sends
    assert metric(on_slave, "quorumq_broker_role", role="slave") == 1

    async def read():
        async with PullConsumer(replica_group["access_point"], GROUP) as consumer:
            pulled = await consumer.pull(TOPIC, 0, 0, 10)
            await consumer.commit_offset(TOPIC, 0, pulled.next_offset)
        return pulled
    pulled = asyncio.run(read())
    on_master = scrape(master)
    assert metric(on_master, "rocketmq_messages_out_total", topic=TOPIC, consumer_group=GROUP) == \
        len(pulled.messages) == 10
    check_for(10, 0.1, lambda: metric(scrape(master), "rocketmq_consumer_lag_messages", topic=TOPIC,
                                      consumer_group=GROUP) == 31 - 10, "the group's lag")
    assert metric(scrape(master), "rocketmq_consumer_lag_latency", topic=TOPIC, consumer_group=GROUP) > 0


def test_replication_lag_rises_while_a_slave_is_stopped_and_falls_when_it_resumes(replica_group):
    _, master, slave = replica_group["processes"]
    check_for(10, 0.1, lambda: metric(scrape(master), "quorumq_in_sync_replicas") == 2, "the slave connected")
    assert metric(scrape(master), "quorumq_replication_lag_bytes", slave_id="1") == 0
    timeouts_before = metric(scrape(master), "quorumq_send_results_total", status="FLUSH_SLAVE_TIMEOUT")
    os.kill(slave["pid"], signal.SIGSTOP)
    try:
        assert send_batch(replica_group, 5) == ["FLUSH_SLAVE_TIMEOUT"] * 5  # stored on the master alone
        stopped = scrape(master)
        assert metric(stopped, "quorumq_replication_lag_bytes", slave_id="1") > 5 * 100
        first_lag_s = metric(stopped, "quorumq_replication_lag_seconds", slave_id="1")
        assert first_lag_s >= 0.9  # the slave has lacked them since before the 1 s slaveTimeout
        check_for(5, 0.1, lambda: metric(scrape(master), "quorumq_replication_lag_seconds", slave_id="1")
                  >= first_lag_s + 0.5, "the lag in seconds grows while the slave is stopped")
        assert metric(scrape(master), "quorumq_send_results_total", status="FLUSH_SLAVE_TIMEOUT") == \
            timeouts_before + 5
    finally:
        os.kill(slave["pid"], signal.SIGCONT)
    check_for(10, 0.1, lambda: metric(scrape(master), "quorumq_replication_lag_bytes", slave_id="1") == 0,
              "the slave caught up")
    assert metric(scrape(master), "quorumq_replication_lag_seconds", slave_id="1") == 0


def test_metrics_are_off_unless_asked_for(tmp_path):
    from quorumq.cli.up import plan
    [namesrv, broker] = plan(tmp_path, 30000, brokers=1, cluster="C", sets=[("metricsExporterType", "DISABLE")],
                             broker_sets=[])
    assert namesrv.metrics_address is None and "metrics" not in broker.describe()


def test_official_clients_sessions_are_counted_while_open(replica_group):
    """rocketmq_producer_connections and rocketmq_consumer_connections count the official clients'
    sessions (their Telemetry streams) by language, version, group and consume mode."""
    master = replica_group["processes"][1]
    config = configuration(replica_group)
    group = "MeteredSessions"
    producer = started_producer(config)
    consumer = simple_consumer(config, group, TOPIC)
    try:
        producer.send(official_message(TOPIC, b"session"))  # its session with the master opens with its route
        check_for(10, 0.1, lambda: metric(scrape(master), "rocketmq_consumer_connections", consumer_group=group,
                                          language="python", consume_mode="simple") == 1, "the consumer's session")
        assert metric(scrape(master), "rocketmq_producer_connections", language="python") >= 1
    finally:
        consumer.shutdown()
        producer.shutdown()
    check_for(10, 0.1, lambda: metric(scrape(master), "rocketmq_consumer_connections", consumer_group=group) == 0,
              "the consumer's session closed")
