"""The official RocketMQ 5 clients' sessions with a quorumq cluster: the Python PushConsumer, a
consumer group the broker refuses, send receipts, and what the access point answers.

Goal: what an application sees from the official clients, unchanged: a PushConsumer consumes, and a
message its listener fails or raises on comes back with a higher delivery attempt; a refused group
ends the client's startup with the broker's error instead of hanging; a send receipt carries the
transaction id RocketMQ's proxy fills in; every v5 RPC sent to the name server gets a v5 status.

Method: the official clients (Python in this process, Node.js through node_client.NodeClient) and
raw v5 stubs against the module's one-broker cluster; the processes' logs are read for tracebacks.
"""

import threading
import time
import uuid

import grpc
import pytest
from rocketmq import ConsumeResult, FilterExpression, MessageListener, PushConsumer
from rocketmq.grpc_protocol import definition_pb2 as v5
from rocketmq.grpc_protocol import service_pb2 as v5s
from rocketmq.grpc_protocol import service_pb2_grpc as v5_grpc
from rocketmq.v5.exception import BadRequestException

from harness import (
    check_for,
    log_end,
    log_since,
    official_access_point,
    official_message,
    process_of,
    v5_message,
    v5_send,
)
from node_client import NodeClient, NodeError
from quorumq.client import AdminClient, Blocking

REFUSED_GROUP = "G" * 200  # longer than a group name may be (limits.NAME_LENGTH_MAX); the clients allow it
STARTUP_TIMEOUT_S = 10.0  # the Node.js client, refused, ends its startup at once; unanswered, it waits for ever
MESSAGING_METHODS = list(v5s.DESCRIPTOR.services_by_name["MessagingService"].methods)


class FailingFirst(MessageListener):
    """Records each delivery; fails the first attempt of b"fail" and raises on that of b"raise"."""

    def __init__(self) -> None:
        self.deliveries: list[tuple[bytes, int]] = []
        self._lock = threading.Lock()

    def consume(self, message):
        with self._lock:
            self.deliveries.append((message.body, message.delivery_attempt))
        if message.delivery_attempt == 1 and message.body == b"fail":
            return ConsumeResult.FAILURE
        if message.delivery_attempt == 1 and message.body == b"raise":
            raise RuntimeError("the listener raised")
        return ConsumeResult.SUCCESS


def test_push_consumer_consumes_and_redelivers_what_its_listener_fails(shared_cluster, client_config, producer):
    topic, group = f"T{uuid.uuid4().hex[:8]}", f"G{uuid.uuid4().hex[:8]}"
    listener = FailingFirst()
    consumer = PushConsumer(client_config, group, listener, {topic: FilterExpression("*")})
    consumer.startup()
    try:
        for body in (b"ok", b"fail", b"raise"):
            producer.send(official_message(topic, body))
        expected = [(b"fail", 1), (b"fail", 2), (b"ok", 1), (b"raise", 1), (b"raise", 2)]
        check_for(15, 0.1, lambda: sorted(listener.deliveries) == expected,
                  "each message consumed, the failed and raised ones again with attempt 2")

        def all_acked() -> bool:
            with Blocking(AdminClient, shared_cluster["access_point"]) as admin:
                queues = [q for progress in admin.consumer_progress(group, topic) for q in progress.queues]
            return all(q.consumer_offset == q.max_offset and q.inflight == 0 for q in queues)

        check_for(10, 0.2, all_acked, "every message acknowledged to the broker")
        assert sorted(listener.deliveries) == expected, "nothing delivered again once acknowledged"
    finally:
        consumer.shutdown()


def test_refused_group_ends_the_node_clients_startup_with_the_error(shared_cluster, tmp_path):
    broker = process_of(shared_cluster, "broker")
    position = log_end(broker)
    with NodeClient(tmp_path / "node-client.log") as node:
        started = time.monotonic()
        with pytest.raises(NodeError, match="ILLEGAL_CONSUMER_GROUP"):
            node.call("consumer", timeout=STARTUP_TIMEOUT_S, access_point=official_access_point(shared_cluster),
                      group=REFUSED_GROUP, topic=f"T{uuid.uuid4().hex[:8]}")
        assert time.monotonic() - started < STARTUP_TIMEOUT_S
    assert "Traceback" not in log_since(broker, position)


def test_refused_settings_get_a_v5_status_on_a_stream_that_stays_open(shared_cluster):
    """Each refused settings command is answered; the stream is not ended, so a client does not
    reopen it and ask again every second."""
    broker = process_of(shared_cluster, "broker")
    position = log_end(broker)
    settings = v5.Settings(client_type=v5.ClientType.PUSH_CONSUMER, subscription=v5.Subscription(
        group=v5.Resource(name=REFUSED_GROUP)))
    with grpc.insecure_channel(broker["address"]) as channel:
        answers = list(v5_grpc.MessagingServiceStub(channel).Telemetry(
            iter([v5s.TelemetryCommand(settings=settings)] * 2), timeout=10))
    assert [a.status.code for a in answers] == [v5.Code.ILLEGAL_CONSUMER_GROUP] * 2
    assert not any(a.HasField("settings") for a in answers)
    assert "Traceback" not in log_since(broker, position)


def test_send_receipt_carries_the_transaction_id(shared_cluster, producer):
    receipt = producer.send(official_message(f"T{uuid.uuid4().hex[:8]}", b"receipt"))
    assert receipt.transaction_id == receipt.message_id  # RocketMQ's broker answers the client's id
    raw = v5_send(process_of(shared_cluster, "broker")["address"], v5_message(f"T{uuid.uuid4().hex[:8]}", b"raw"))
    [entry] = raw.entries
    assert entry.transaction_id == entry.message_id != ""


def test_recall_message_to_the_access_point_gets_a_v5_status(producer):
    with pytest.raises(BadRequestException) as refused:
        producer.recall_message(f"T{uuid.uuid4().hex[:8]}", "no-such-handle")
    assert refused.value.code == v5.Code.BAD_REQUEST and "INVALID_RECALL_HANDLE" in str(refused.value)


@pytest.mark.parametrize("method", MESSAGING_METHODS, ids=[m.name for m in MESSAGING_METHODS])
def test_every_v5_rpc_to_the_name_server_gets_a_v5_status(shared_cluster, method):
    namesrv = process_of(shared_cluster, "namesrv")
    position = log_end(namesrv)
    request = getattr(v5s, method.input_type.name)()
    with grpc.insecure_channel(shared_cluster["access_point"]) as channel:
        call = getattr(v5_grpc.MessagingServiceStub(channel), method.name)
        if method.client_streaming:
            [answer] = list(call(iter([request]), timeout=5))
        elif method.server_streaming:
            [answer] = list(call(request, timeout=5))
        else:
            answer = call(request, timeout=5)
    expected = v5.Code.ILLEGAL_TOPIC if method.name in ("QueryRoute", "RecallMessage") else v5.Code.NOT_IMPLEMENTED
    assert answer.status.code == expected, answer.status
    logged = log_since(namesrv, position)  # the process logs before it answers
    assert "Traceback" not in logged and len(logged.splitlines()) <= 1, logged
