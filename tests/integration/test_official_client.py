"""The official RocketMQ 5 Python client, unchanged, against a quorumq cluster."""

import time
import uuid

from harness import (
    check_for,
    configuration,
    official_message,
    process_of,
    receive_all,
    restart_process,
    send_sync_and_async,
    simple_consumer,
    started_producer,
    wait_registered,
)
from quorumq import limits


def test_send_receive_ack(client_config, producer):
    topic = f"T{uuid.uuid4().hex[:8]}"
    consumer = simple_consumer(client_config, "G1", topic)
    try:
        sent = send_sync_and_async(producer, topic, 20)
        received = receive_all(consumer, len(sent))
        assert {m.message_id: m.body for m in received} == sent
        assert all(m.tag == "A" and m.delivery_attempt == 1 for m in received)
        assert not any(m.corrupted for m in received)
        for m in received:
            consumer.ack(m)
        assert consumer.receive(32, 30) == [], "acked messages must not come back"
    finally:
        consumer.shutdown()


def test_unacked_message_is_redelivered_after_invisible_time(client_config, producer):
    topic = f"T{uuid.uuid4().hex[:8]}"
    consumer = simple_consumer(client_config, "G2", topic)
    try:
        receipt = producer.send(official_message(topic, b"once"))
        first = receive_all(consumer, 1, invisible_s=2)
        assert [m.message_id for m in first] == [receipt.message_id]
        again = receive_all(consumer, 1, invisible_s=30, timeout_s=15)
        assert [m.message_id for m in again] == [receipt.message_id]
        assert again[0].delivery_attempt == 2
        consumer.ack(again[0])
    finally:
        consumer.shutdown()


def test_change_invisible_duration_brings_message_back_sooner(client_config, producer):
    topic = f"T{uuid.uuid4().hex[:8]}"
    consumer = simple_consumer(client_config, "G3", topic)
    try:
        producer.send(official_message(topic, b"nack-me"))
        [message] = receive_all(consumer, 1, invisible_s=60)
        consumer.change_invisible_duration(message, 1)
        started = time.monotonic()
        again = receive_all(consumer, 1, invisible_s=60, timeout_s=15)
        assert [m.body for m in again] == [b"nack-me"]
        assert time.monotonic() - started < 15
        assert again[0].delivery_attempt == 2
        consumer.ack(again[0])
    finally:
        consumer.shutdown()


def test_tag_filter_selects_on_receive(client_config, producer):
    topic = f"T{uuid.uuid4().hex[:8]}"
    consumer = simple_consumer(client_config, "G4", topic, expression="red")
    try:
        for index in range(10):
            producer.send(official_message(topic, f"{index}".encode(), tag="red" if index % 2 else "blue"))
        received = receive_all(consumer, 5)
        assert sorted(m.body for m in received) == [b"1", b"3", b"5", b"7", b"9"]
        for m in received:
            consumer.ack(m)
    finally:
        consumer.shutdown()


def test_acked_sends_survive_broker_restart(cluster):
    client_config = configuration(cluster)
    producer = started_producer(client_config)
    topic = f"T{uuid.uuid4().hex[:8]}"
    consumer = simple_consumer(client_config, "G5", topic)
    sent = set()
    try:
        for index in range(30):
            sent.add(producer.send(official_message(topic, f"before-{index}".encode())).message_id)
        first = receive_all(consumer, 1)
        for m in first:
            consumer.ack(m)
        acked = {m.message_id for m in first}
    finally:
        consumer.shutdown()
    broker = process_of(cluster, "broker")
    restart_process(cluster, broker)
    wait_registered(cluster)
    # The client's channel reconnects with gRPC's backoff, so the first sends may need the
    # application's retry, as in any client after its broker restarted.
    for index in range(10):
        body = f"after-{index}".encode()
        sent.add(check_for(20, 0.5, lambda body=body: producer.send(official_message(topic, body)),
                           "a send after the restart").message_id)
    consumer = simple_consumer(client_config, "G5", topic)
    try:
        received = receive_all(consumer, len(sent) - len(acked))
        assert {m.message_id for m in received} | acked == sent, "an acknowledged send went missing"
        assert not {m.message_id for m in received} & acked, "group progress was lost across the restart"
    finally:
        consumer.shutdown()
        producer.shutdown()


def test_body_of_max_message_size_round_trips(client_config, producer):
    topic = f"T{uuid.uuid4().hex[:8]}"
    consumer = simple_consumer(client_config, "G6", topic)
    try:
        body = (bytes(range(256)) * (limits.MESSAGE_BODY_BYTES_DEFAULT // 256 + 1))[:limits.MESSAGE_BODY_BYTES_DEFAULT]
        receipt = producer.send(official_message(topic, body))
        [message] = receive_all(consumer, 1)
        assert message.message_id == receipt.message_id and message.body == body and not message.corrupted
        consumer.ack(message)
    finally:
        consumer.shutdown()
