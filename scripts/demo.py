"""The demo `make run` shows: the official RocketMQ 5 Python client, unchanged, on a quorumq cluster.

A Producer sends with `send` and `send_async`; a SimpleConsumer receives and acks; then every
broker's commit-log end is shown, so a replica group's slaves can be seen holding the master's bytes.
A cluster whose cluster.json names a CA (`quorumq up --tls`) is reached over TLS: GRPC_DEFAULT_SSL_ROOTS_FILE_PATH
and QUORUMQ_TLS_CA must name it in the environment (scripts/demo.sh sets them). Usage:
    .venv/bin/python scripts/demo.py run/demo/cluster.json
"""

import json
import sys
import time
import uuid

from rocketmq import ClientConfiguration, Credentials, FilterExpression, Message, Producer, SimpleConsumer

from quorumq.client import AdminClient, Blocking

MESSAGES_EACH_WAY = 3
RECEIVE_TIMEOUT_S = 30.0


def message(topic: str, body: str, tag: str, key: str) -> Message:
    built = Message()
    built.topic = topic
    built.body = body.encode()
    built.tag = tag
    built.keys = key
    return built


def main(cluster_file: str) -> int:
    cluster = json.loads(open(cluster_file).read())
    access_point = cluster["access_point"]
    topic, group = f"DemoTopic_{uuid.uuid4().hex[:6]}", "DemoGroup"
    tls = "ca" in cluster
    print(f"demo: official rocketmq client against {access_point}{' over TLS' if tls else ''}, topic {topic}, "
          f"group {group}")
    config = ClientConfiguration(access_point, Credentials(), request_timeout=5)

    # Subscribe before sending: a new group reads a queue from its start only while the queue's
    # first message is in memory (RocketMQ's rule), else from the end as of its first contact.
    consumer = SimpleConsumer(config, group, {topic: FilterExpression("*")}, await_duration=2, tls_enable=tls)
    producer = Producer(config, (topic,), tls_enable=tls)
    consumer.startup()
    producer.startup()
    try:
        consumer.receive(16, 30)  # the group's first receive fixes its start position
        sent = {}
        for index in range(MESSAGES_EACH_WAY):
            receipt = producer.send(message(topic, f"hello {index} (send)", "demo", f"sync-{index}"))
            sent[receipt.message_id] = "send"
            print(f"  send        -> message id {receipt.message_id}, queue offset {receipt.offset}")
        futures = [producer.send_async(message(topic, f"hello {index} (send_async)", "demo", f"async-{index}"))
                   for index in range(MESSAGES_EACH_WAY)]
        for future in futures:
            receipt = future.result(timeout=10)
            sent[receipt.message_id] = "send_async"
            print(f"  send_async  -> message id {receipt.message_id}, queue offset {receipt.offset}")

        received: set[str] = set()
        deadline = time.monotonic() + RECEIVE_TIMEOUT_S
        while not sent.keys() <= received and time.monotonic() < deadline:
            for got in consumer.receive(16, 30):
                consumer.ack(got)
                received.add(got.message_id)
                print(f"  receive+ack <- {got.body.decode()!r} tag={got.tag} keys={','.join(got.keys)} "
                      f"attempt={got.delivery_attempt} id={got.message_id}")
        ok = sent.keys() <= received
        print(f"demo: sent {len(sent)}, received and acked {len(received)}: {'OK' if ok else 'MISSING MESSAGES'}")
        show_replicas(cluster)
        return 0 if ok else 1
    finally:
        producer.shutdown()
        consumer.shutdown()


def show_replicas(cluster: dict) -> None:
    with Blocking(AdminClient, cluster["access_point"]) as admin:
        for process in cluster["processes"]:
            if process["kind"] == "broker":
                status = admin.broker_status(process["address"])
                print(f"  {process['broker_name']} id {process['broker_id']} ({status['brokerRole']}): "
                      f"commit log ends at {status['commitLogMaxOffset']}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
