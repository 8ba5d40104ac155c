"""SIGKILL a broker at random moments while it stores acknowledged batches under SYNC_FLUSH:
after each restart every acknowledged message is readable at its offset, byte for byte."""

import random
import signal
import threading
import time
import uuid

import grpc
import pytest
from rocketmq.grpc_protocol import definition_pb2 as v5
from rocketmq.grpc_protocol import service_pb2 as v5s
from rocketmq.grpc_protocol import service_pb2_grpc as v5_grpc

from harness import pid_alive, process_of, start_process, stop_process, wait_registered

SEED = 20261122
ROUNDS = 4
QUEUES = 4
TOPIC = "Crash"


def batch(rng: random.Random, queue_id: int, size: int) -> list[v5.Message]:
    return [v5.Message(topic=v5.Resource(name=TOPIC), body=rng.randbytes(rng.randrange(1, 2048)),
                       system_properties=v5.SystemProperties(
                           message_id=uuid.uuid4().hex, message_type=v5.MessageType.NORMAL, queue_id=queue_id,
                           body_encoding=v5.Encoding.IDENTITY)) for _ in range(size)]


def send_until_broken(address: str, rng: random.Random, acked: dict, stop: threading.Event) -> None:
    """Send batches to explicit queues and record what the broker acknowledged, until it dies."""
    with grpc.insecure_channel(address) as channel:
        stub = v5_grpc.MessagingServiceStub(channel)
        turn = 0
        while not stop.is_set():
            queue_id = turn % QUEUES
            turn += 1
            messages = batch(rng, queue_id, rng.randrange(1, 64))
            try:
                response = stub.SendMessage(v5s.SendMessageRequest(messages=messages), timeout=5,
                                            metadata=[("x-quorumq-explicit-queue", "1")])
            except grpc.RpcError:
                return
            for message, entry in zip(messages, response.entries):
                if entry.status.code == v5.Code.OK:
                    key = (queue_id, entry.offset)
                    assert key not in acked, f"offset {key} acknowledged twice"
                    acked[key] = message.body


def read_queue(stub, queue_id: int) -> dict[int, bytes]:
    stored, offset = {}, 0
    while True:
        responses = list(stub.PullMessage(v5s.PullMessageRequest(
            group=v5.Resource(name="Checker"), message_queue=v5.MessageQueue(topic=v5.Resource(name=TOPIC),
                                                                             id=queue_id),
            offset=offset, batch_size=256), timeout=10))
        messages = [r.message for r in responses if r.HasField("message")]
        for message in messages:
            stored[message.system_properties.queue_offset] = message.body
        next_offset = responses[-1].next_offset
        if not messages or next_offset == offset:
            return stored
        offset = next_offset


@pytest.mark.timeout(240)
def test_acknowledged_messages_survive_sigkill(start_cluster):
    cluster = start_cluster(sets={"flushDiskType": "SYNC_FLUSH", "defaultTopicQueueNums": str(QUEUES)})
    broker = process_of(cluster, "broker")
    rng = random.Random(SEED)
    acked: dict[tuple[int, int], bytes] = {}
    for _ in range(ROUNDS):
        stop = threading.Event()
        sender = threading.Thread(target=send_until_broken, args=(broker["address"], rng, acked, stop))
        sender.start()
        time.sleep(rng.uniform(0.5, 2.0))
        stop_process(broker, signal.SIGKILL)
        stop.set()
        sender.join(timeout=30)
        start_process(broker)
        wait_registered(cluster)
        assert pid_alive(broker["pid"]), f"the broker did not come back; see {broker['log']}"
    assert len(acked) > 100, f"too few acknowledged sends to mean anything (seed {SEED})"
    with grpc.insecure_channel(broker["address"]) as channel:
        stub = v5_grpc.MessagingServiceStub(channel)
        stored = {}
        for queue_id in range(QUEUES):
            stored.update({(queue_id, offset): body for offset, body in read_queue(stub, queue_id).items()})
    lost = [key for key in acked if key not in stored]
    changed = [key for key in acked if key in stored and stored[key] != acked[key]]
    assert not lost, f"{len(lost)} acknowledged messages lost, e.g. {lost[:5]} (seed {SEED})"
    assert not changed, f"{len(changed)} acknowledged messages changed, e.g. {changed[:5]} (seed {SEED})"
