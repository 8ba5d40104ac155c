"""What a consumer receives, with the official clients unchanged: where a new consumer group starts
(RocketMQ's initPopOffsetByCheckMsgInMem rule), and messages at and above the size every official
client can receive (the Node.js client keeps gRPC's 4 MiB receive limit; the Python client lifts it).
"""

import uuid
from contextlib import contextmanager

from harness import check_for, configuration, official_message, receive_all, simple_consumer, started_producer
from node_client import NodeClient
from quorumq import limits
from quorumq.client import AdminClient, Blocking


def new_topic() -> str:
    return f"T{uuid.uuid4().hex[:8]}"


@contextmanager
def broker_config(cluster: dict, key: str, value: str, default: str):
    """A live config change on every broker of the cluster for one test, undone after it."""
    with Blocking(AdminClient, cluster["access_point"]) as admin:
        admin.update_broker_config(key, value)
        try:
            yield admin
        finally:
            admin.update_broker_config(key, default)


def test_a_new_group_receives_what_was_sent_before_its_first_contact(shared_cluster):
    config, topic = configuration(shared_cluster), new_topic()
    producer = started_producer(config)
    try:
        sent = {producer.send(official_message(topic, f"early-{index}".encode())).message_id for index in range(5)}
    finally:
        producer.shutdown()
    consumer = simple_consumer(config, "GLate", topic)
    try:
        received = receive_all(consumer, len(sent))
        assert {m.message_id for m in received} == sent, "the queue's first message is in memory: read from 0"
    finally:
        consumer.shutdown()


def test_without_the_memory_check_a_new_group_starts_at_the_end(shared_cluster):
    config, topic = configuration(shared_cluster), new_topic()
    with broker_config(shared_cluster, "initPopOffsetByCheckMsgInMem", "false", "true"):
        producer = started_producer(config)
        try:
            for index in range(3):
                producer.send(official_message(topic, f"before-{index}".encode()))
            consumer = simple_consumer(config, "GFromEnd", topic)
            try:
                assert consumer.receive(32, 30) == [], "the group's first contact: it starts at the end"
                after = {producer.send(official_message(topic, f"after-{index}".encode())).message_id
                         for index in range(2)}
                received = receive_all(consumer, len(after)) + consumer.receive(32, 30)
                assert {m.message_id for m in received} == after
            finally:
                consumer.shutdown()
        finally:
            producer.shutdown()


def node_session(node: NodeClient, cluster: dict, topic: str, group: str) -> None:
    node.call("producer", access_point=cluster["access_point"], topics=[topic], request_timeout_ms=10_000)
    node.call("consumer", access_point=cluster["access_point"], group=group, topic=topic, await_ms=1000,
              request_timeout_ms=10_000)


def node_receive(node: NodeClient, expected: int, timeout_s: float = 20.0) -> list[dict]:
    """Receive and ack until `expected` messages came (a failed receive is tried again until the timeout)."""
    received: list[dict] = []

    def more() -> bool:
        for message in node.call("receive", max=32, invisible_ms=30_000)["messages"]:
            node.call("ack", message_id=message["message_id"])
            received.append(message)
        return len(received) >= expected

    check_for(timeout_s, 0, more, f"{expected} messages received")
    return received


def test_the_largest_accepted_message_reaches_a_client_with_the_default_receive_limit(shared_cluster, tmp_path):
    topic = new_topic()
    # The largest properties the client sends: tag, 32 keys and user properties up to the limit.
    keys = [f"{index:02d}" + "k" * 253 for index in range(limits.KEYS_PER_MESSAGE_MAX)]
    user = {f"p{index:03d}": "v" * 180 for index in range(120)}
    with NodeClient(tmp_path / "node.log") as node:
        node_session(node, shared_cluster, topic, "GLargest")
        big = node.call("send", topic=topic, body_size=limits.MESSAGE_BODY_BYTES_DEFAULT, tag="t" * 255,
                        keys=keys, properties=user)["message_id"]
        small = [node.call("send", topic=topic, body=f"small-{index}")["message_id"] for index in range(3)]
        received = {message["message_id"]: message for message in node_receive(node, 4)}
        assert set(received) == {big, *small}
        assert len(received[big]["body"]) == limits.MESSAGE_BODY_BYTES_DEFAULT
        assert received[big]["properties"] == user and received[big]["keys"] == keys


def test_a_message_too_large_for_the_client_is_a_dead_letter_and_does_not_block_those_behind_it(shared_cluster,
                                                                                                 tmp_path):
    topic, size = new_topic(), 4 * limits.MiB + 100
    default = str(limits.MESSAGE_BODY_BYTES_DEFAULT)
    with broker_config(shared_cluster, "maxMessageSize", str(5 * limits.MiB), default) as admin, \
            NodeClient(tmp_path / "node.log") as node:
        node_session(node, shared_cluster, topic, "GNode")
        big = node.call("send", topic=topic, body_size=size)["message_id"]
        small = {node.call("send", topic=topic, body=f"small-{index}")["message_id"] for index in range(3)}
        assert {message["message_id"] for message in node_receive(node, 3)} == small
        [address] = [process["address"] for process in shared_cluster["processes"] if process["kind"] == "broker"]
        assert admin.broker_status(address)["msgSkippedTooLargeTotal"] == "1", "skipped for the group, counted once"
        config = configuration(shared_cluster)
        # A client that lifts gRPC's limit (the Python one) receives it, in another group...
        consumer = simple_consumer(config, "GPython", topic)
        try:
            received = {m.message_id: m for m in receive_all(consumer, 4)}
            assert set(received) == {big, *small} and len(received[big].body) == size
        finally:
            consumer.shutdown()
        # ... and from the Node.js client's group's DLQ topic.
        dead_letters = simple_consumer(config, "GDeadLetters", "%DLQ%GNode")
        try:
            [letter] = receive_all(dead_letters, 1)
            assert letter.message_id == big and len(letter.body) == size
            assert letter.properties == {"DLQ_ORIGIN_TOPIC": topic, "DLQ_ORIGIN_MESSAGE_ID": big, "RECONSUME_TIME": "1"}
        finally:
            dead_letters.shutdown()
