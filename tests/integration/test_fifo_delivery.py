"""FIFO delivery, retries and dead letters through the official Python client on real processes.

Goal: a FIFO group (updateSubGroup -o true) on a FIFO topic (updateTopic -a +message.type=FIFO)
gets each message group's messages in their order with several consumers, never a message while
an earlier one of its queue is out and unacked; an expired batch comes back in order before
anything behind it; a message whose last allowed delivery failed, or that its consumer forwards,
is in %DLQ%<group> with its origin and attempts, and the queue goes on behind it; the order holds
across a consumer's SIGKILL, a broker restart and, in controller mode, the master's SIGKILL.

Method: what a user sees. Each receive is timed against the acks the consumers issued: a receive
may carry a queue's offset only once every earlier offset handed out of that queue had its ack
issued before the receive returned (the broker cannot see an ack before it is issued). Invisible
times are short (the broker's minimum is 1 s) so that expiries take seconds.
"""

import json
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid

import grpc
import pytest
from rocketmq import ClientConfiguration, Credentials, Message
from rocketmq.grpc_protocol import definition_pb2 as v5
from rocketmq.grpc_protocol import service_pb2 as v5s
from rocketmq.grpc_protocol import service_pb2_grpc as v5_grpc

from harness import (
    check_for,
    cli,
    configuration,
    process_of,
    read_dead_letters,
    receive_all,
    restart_process,
    simple_consumer,
    started_producer,
    stop_process,
    v5_message,
    v5_send,
    wait_registered,
)
from quorumq.core.message_types import fifo_queue
from test_receive_rules import broker_config

CLUSTER = "DefaultCluster"
# A consumer in a process of its own: receives a batch with the invisible time given, reports when it
# asked (time.monotonic is one clock for every process of the machine) and what it got as a JSON
# line, and waits to be killed without acking.
CRASHING_CONSUMER = textwrap.dedent("""
    import json, sys, time
    from rocketmq import ClientConfiguration, Credentials, FilterExpression, SimpleConsumer

    access_point, group, topic, invisible_s = sys.argv[1:]
    consumer = SimpleConsumer(ClientConfiguration(access_point, Credentials(), request_timeout=5), group,
                              {topic: FilterExpression("*")}, await_duration=2)
    consumer.startup()
    asked = time.monotonic()
    messages = consumer.receive(2, int(invisible_s))
    print(json.dumps({"asked": asked, "bodies": [message.body.decode() for message in messages],
                      "attempts": [message.delivery_attempt for message in messages]}), flush=True)
    time.sleep(600)
""")


def admin(cluster: dict, *args: object) -> None:
    done = cli("admin", *args, "-n", cluster["access_point"], "-c", CLUSTER)
    assert done.returncode == 0, done.stderr


def fifo_topic(cluster: dict, queues: int = 2) -> str:
    topic = f"F{uuid.uuid4().hex[:8]}"
    admin(cluster, "updateTopic", "-t", topic, "-r", queues, "-w", queues, "-a", "+message.type=FIFO")
    return topic


def fifo_group(cluster: dict, retry_max_times: int = 16, orderly: bool = True) -> str:
    group = f"G{uuid.uuid4().hex[:8]}"
    admin(cluster, "updateSubGroup", "-g", group, "-o", str(orderly).lower(), "-r", retry_max_times)
    return group


def fifo_message(topic: str, group: str, body: str) -> Message:
    message = Message()
    message.topic, message.body, message.message_group = topic, body.encode(), group
    return message


def one_queue_sent(cluster: dict, count: int, config: ClientConfiguration | None = None,
                   **group_options) -> tuple[str, str, ClientConfiguration, list[str]]:
    """A FIFO topic of one queue holding m0..m<count-1> of message group "g", a new group
    (`fifo_group`'s options) and the client's configuration: (topic, group, config, message ids)."""
    topic, group = fifo_topic(cluster, queues=1), fifo_group(cluster, **group_options)
    config = config or configuration(cluster)
    producer = started_producer(config)
    try:
        return topic, group, config, [producer.send(fifo_message(topic, "g", f"m{seq}")).message_id
                                      for seq in range(count)]
    finally:
        producer.shutdown()


def broker_address(cluster: dict) -> str:
    return process_of(cluster, "broker")["address"]


def bodies(messages) -> list[str]:
    return [message.body.decode() for message in messages]


class Ledger:
    """What consumers were handed and acked, checked at each receive (see the module's doc).
    `positions`: each body's queue and offset, known from the order they were sent in."""

    def __init__(self, positions: dict[str, tuple[int, int]]) -> None:
        self.positions = positions
        self.lock = threading.Lock()
        self.handed: dict[tuple[int, int], float] = {}  # (queue, offset) -> when first handed out
        self.ack_issued: dict[tuple[int, int], float] = {}
        self.violations: list[str] = []
        self.received: list[tuple[str, int]] = []  # (body, attempt), in the order handed out

    def check(self, messages, returned: float) -> None:
        with self.lock:
            keys = [self.positions[message.body.decode()] for message in messages]
            for key in keys:  # one receive may carry several messages of a queue, in order
                earlier = [held for held in self.handed if held[0] == key[0] and held[1] < key[1]
                           and held not in keys and not self.ack_issued.get(held, returned + 1) < returned]
                if earlier:
                    self.violations.append(f"{key} handed out while {sorted(earlier)} were out unacked")
            for key, message in zip(keys, messages):
                self.handed.setdefault(key, returned)
                self.received.append((message.body.decode(), message.delivery_attempt))

    def acking(self, message) -> None:
        with self.lock:
            self.ack_issued[self.positions[message.body.decode()]] = time.monotonic()


def test_several_consumers_get_each_message_group_in_order(shared_cluster):
    queues = 2
    topic, group = fifo_topic(shared_cluster, queues), fifo_group(shared_cluster)
    config = configuration(shared_cluster)
    producer = started_producer(config)
    sent = {f"g{key}": [f"g{key}-{seq}" for seq in range(6)] for key in range(8)}
    positions: dict[str, tuple[int, int]] = {}
    try:
        for seq in range(6):
            for key, values in sent.items():  # one at a time: a queue's offsets follow this order
                producer.send(fifo_message(topic, key, values[seq]))
                queue = fifo_queue(key, queues)
                positions[values[seq]] = (queue, sum(held[0] == queue for held in positions.values()))
    finally:
        producer.shutdown()
    ledger, total = Ledger(positions), sum(map(len, sent.values()))
    consumers = [simple_consumer(config, group, topic) for _ in range(3)]

    def consume(consumer) -> None:
        deadline = time.monotonic() + 40
        while len(ledger.received) < total and time.monotonic() < deadline:
            messages = consumer.receive(4, 10)
            ledger.check(messages, time.monotonic())
            for message in messages:
                ledger.acking(message)
                consumer.ack(message)

    try:
        threads = [threading.Thread(target=consume, args=(consumer,)) for consumer in consumers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        for consumer in consumers:
            consumer.shutdown()
    assert not ledger.violations
    assert sorted(body for body, _ in ledger.received) == sorted(sum(sent.values(), []))
    for key, values in sent.items():
        assert [body for body, _ in ledger.received if body.startswith(f"{key}-")] == values, key


def test_an_expired_batch_comes_back_in_order_before_anything_behind_it(shared_cluster):
    topic, group, config, _ = one_queue_sent(shared_cluster, 4)
    consumer = simple_consumer(config, group, topic)
    try:
        first = consumer.receive(2, 5)
        assert bodies(first) == ["m0", "m1"]
        consumer.ack(first[1])
        assert consumer.receive(2, 5) == [], "m0 is out: nothing of its queue goes (a 2 s long poll)"
        again = receive_all(consumer, 1, invisible_s=2)
        assert bodies(again) == ["m0"] and again[0].delivery_attempt == 2
        consumer.change_invisible_duration(again[0], 1)  # a nack: back after 1 s, still first
        third = receive_all(consumer, 1, invisible_s=10)
        assert bodies(third) == ["m0"] and third[0].delivery_attempt == 3
        consumer.ack(third[0])
        rest = receive_all(consumer, 2)
        assert bodies(rest) == ["m2", "m3"] and [m.delivery_attempt for m in rest] == [1, 1]
        for message in rest:
            consumer.ack(message)
    finally:
        consumer.shutdown()


@pytest.mark.parametrize("orderly", [True, False], ids=["fifo", "normal"])
def test_a_message_whose_last_delivery_failed_is_a_dead_letter(shared_cluster, orderly):
    topic, group, config, ids = one_queue_sent(shared_cluster, 2, retry_max_times=1, orderly=orderly)
    consumer = simple_consumer(config, group, topic)
    try:
        attempts = []
        deadline = time.monotonic() + 30
        while len(attempts) < 2 and time.monotonic() < deadline:  # m0 fails its two deliveries (retryMaxTimes 1)
            for message in consumer.receive(1, 1):
                if message.body == b"m0":
                    attempts.append(message.delivery_attempt)
                    consumer.change_invisible_duration(message, 1)
                else:
                    assert not orderly, "m1 is behind m0 in its queue"
                    consumer.ack(message)
        assert attempts == [1, 2]
        if orderly:
            [behind] = receive_all(consumer, 1)
            assert behind.body == b"m1", "the queue goes on once m0 is a dead letter"
            consumer.ack(behind)
        assert consumer.receive(32, 2) == [], "m0 is not delivered again"
    finally:
        consumer.shutdown()
    [letter] = read_dead_letters(config, group, 1)
    assert letter.message_id == ids[0] and letter.body == b"m0" and letter.message_group == "g"
    assert letter.properties == {"DLQ_ORIGIN_TOPIC": topic, "DLQ_ORIGIN_MESSAGE_ID": ids[0], "RECONSUME_TIME": "2"}
    progress = cli("admin", "consumerProgress", "-n", shared_cluster["access_point"], "-g", group, "--json")
    assert progress.returncode == 0, progress.stderr
    assert json.loads(progress.stdout)["dead_letters"] == 1


@pytest.mark.parametrize("orderly", [True, False], ids=["fifo", "normal"])
def test_a_dead_letter_that_cannot_be_written_is_held_and_the_receive_answers_the_rest(shared_cluster, orderly):
    """The receive that reaches a dead letter whose copy fails (its DLQ topic is read-only here)
    still answers what it took of another queue; the letter is held and written once it can be
    (checked for a FIFO group: the hold is the same for every group and takes 10 s)."""
    topic, group = fifo_topic(shared_cluster), fifo_group(shared_cluster, retry_max_times=0, orderly=orderly)
    admin(shared_cluster, "updateTopic", "-t", f"%DLQ%{group}", "-r", 1, "-w", 1, "-p", 4)
    config = configuration(shared_cluster)
    first, other = "a", next(key for key in (f"b{n}" for n in range(64)) if fifo_queue(key, 2) != fifo_queue("a", 2))
    producer = started_producer(config)
    consumer = simple_consumer(config, group, topic)
    try:
        spent_id = producer.send(fifo_message(topic, first, "spent")).message_id
        [spent] = consumer.receive(1, 30)
        producer.send(fifo_message(topic, other, "other queue"))
        consumer.change_invisible_duration(spent, 0)  # its one delivery (retryMaxTimes 0) failed
        assert bodies(consumer.receive(32, 30)) == ["other queue"], "answered beside the dead letter refused"
        assert consumer.receive(32, 30) == [], "the dead letter is held, not delivered"
        if not orderly:
            return
        admin(shared_cluster, "updateTopic", "-t", f"%DLQ%{group}", "-r", 1, "-w", 1, "-p", 6)

        def written() -> bool:
            assert consumer.receive(32, 30) == [], "a dead letter is not delivered again"
            progress = cli("admin", "consumerProgress", "-n", shared_cluster["access_point"], "-g", group, "--json")
            return json.loads(progress.stdout)["dead_letters"] == 1

        check_for(30, 0, written, "the dead letter written once its hold ended")
        [letter] = read_dead_letters(config, group, 1)
        assert letter.message_id == spent_id and letter.body == b"spent"
    finally:
        consumer.shutdown()
        producer.shutdown()


def forward(address: str, group: str, topic: str, message_id: str, handle: str) -> v5.Status:
    request = v5s.ForwardMessageToDeadLetterQueueRequest(
        group=v5.Resource(name=group), topic=v5.Resource(name=topic), receipt_handle=handle, message_id=message_id,
        delivery_attempt=1, max_delivery_attempts=17)
    with grpc.insecure_channel(address) as channel:
        return v5_grpc.MessagingServiceStub(channel).ForwardMessageToDeadLetterQueue(request, timeout=10).status


def test_a_consumer_forwards_a_message_it_holds_to_the_dead_letters(shared_cluster):
    topic, group, config, ids = one_queue_sent(shared_cluster, 2)
    consumer = simple_consumer(config, group, topic)
    address = broker_address(shared_cluster)
    try:
        [first] = consumer.receive(1, 30)
        assert first.body == b"m0"
        refused = forward(address, group, topic, ids[0], "0:0:abc")
        assert v5.Code.Name(refused.code) == "INVALID_RECEIPT_HANDLE"
        assert v5.Code.Name(forward(address, group, topic, ids[0], first.receipt_handle).code) == "OK"
        [behind] = receive_all(consumer, 1)
        assert behind.body == b"m1"
        consumer.ack(behind)
    finally:
        consumer.shutdown()
    [letter] = read_dead_letters(config, group, 1)
    assert letter.message_id == ids[0] and letter.properties["RECONSUME_TIME"] == "1"


def test_a_dead_letter_makes_its_dlq_topic_where_a_clients_send_may_not(shared_cluster):
    """With autoCreateTopicEnable false a client's send to a new %DLQ% topic is refused as to any
    new topic, while a group's dead letter still makes its DLQ topic."""
    topic, group, config, ids = one_queue_sent(shared_cluster, 1)
    address = broker_address(shared_cluster)
    with broker_config(shared_cluster, "autoCreateTopicEnable", "false", "true"):
        refused = v5_send(address, v5_message(f"%DLQ%{group}", b"from a client"))
        assert refused.status.code == v5.Code.TOPIC_NOT_FOUND, refused.status
        consumer = simple_consumer(config, group, topic)
        try:
            [message] = consumer.receive(1, 30)
            assert v5.Code.Name(forward(address, group, topic, ids[0], message.receipt_handle).code) == "OK"
        finally:
            consumer.shutdown()
        [letter] = read_dead_letters(config, group, 1)
        assert letter.message_id == ids[0]


@pytest.mark.timeout(60)
def test_fifo_order_holds_across_a_consumers_sigkill(shared_cluster):
    """A consumer in another process receives m0 and m1 and is SIGKILLed holding them: a consumer of
    the same group gets nothing of their queue until their lease ends, then m0 and m1 again first,
    in order, then m2 and m3."""
    invisible_s = 5
    topic, group, config, _ = one_queue_sent(shared_cluster, 4)
    consumer = simple_consumer(config, group, topic)
    with subprocess.Popen([sys.executable, "-c", CRASHING_CONSUMER, shared_cluster["access_point"], group, topic,
                           str(invisible_s)], stdout=subprocess.PIPE, text=True) as crashing:
        try:
            report = json.loads(crashing.stdout.readline())
            crashing.send_signal(signal.SIGKILL)
            assert report["bodies"] == ["m0", "m1"] and report["attempts"] == [1, 1]
            leased_until = report["asked"] + invisible_s  # the broker leased them no sooner than asked
            asked: list[float] = []

            def next_receive():
                asked.append(time.monotonic())
                return consumer.receive(2, 10)

            received = check_for(20, 0, next_receive, "m0 and m1 again after their lease")
            assert asked[0] < leased_until, "the test asked while the killed consumer's lease held"
            assert time.monotonic() >= leased_until, "handed out while the killed consumer's lease held"
            assert bodies(received) == ["m0", "m1"] and [m.delivery_attempt for m in received] == [2, 2]
            for message in received:
                consumer.ack(message)
            rest = receive_all(consumer, 2)
            assert bodies(rest) == ["m2", "m3"] and [m.delivery_attempt for m in rest] == [1, 1]
        finally:
            crashing.kill()
            crashing.wait()
            consumer.shutdown()


def test_a_lease_outlasts_a_broker_restart_and_its_message_comes_back_first(cluster):
    topic, group, config, _ = one_queue_sent(cluster, 3)
    consumer = simple_consumer(config, group, topic)
    try:
        [first] = consumer.receive(1, 8)
        leased_until = time.monotonic() + 8
        assert first.body == b"m0"
    finally:
        consumer.shutdown()
    restart_process(cluster, process_of(cluster, "broker"))
    wait_registered(cluster)
    consumer = simple_consumer(config, group, topic)
    try:
        received = check_for(60, 0, lambda: consumer.receive(2, 30), "m0 again after its lease")
        check_m0_again_then_the_rest(consumer, received, leased_until,
                                     "handed out again before the lease from before the restart ended")
    finally:
        consumer.shutdown()


def check_m0_again_then_the_rest(consumer, received, leased_until: float, early: str) -> None:
    """m0, leased until `leased_until`, is what a receive got back (not before, else `early`), on its
    second delivery; once it is acked, m1 and m2 follow in order."""
    assert time.monotonic() >= leased_until - 1, early
    assert bodies(received) == ["m0"] and received[0].delivery_attempt == 2
    consumer.ack(received[0])
    assert bodies(receive_all(consumer, 2)) == ["m1", "m2"]


def test_fifo_order_holds_across_the_masters_sigkill(controller_group):
    """A consumer holds message N of a queue when the master dies: the new master hands out
    nothing of that queue until N's lease ends, then N before N+1."""
    controller_group.restore()  # every broker up and in the SyncStateSet: a slave can be elected
    cluster = controller_group.cluster
    endpoints = ";".join(broker["address"] for broker in controller_group.brokers)
    topic, group, config, _ = one_queue_sent(cluster, 3, ClientConfiguration(endpoints, Credentials(),
                                                                              request_timeout=5))
    consumer = simple_consumer(config, group, topic)
    try:
        [held] = consumer.receive(1, 15)
        leased_until = time.monotonic() + 15
        assert held.body == b"m0"
        old_master = controller_group.master()
        stop_process(old_master, signal.SIGKILL)
        check_for(30, 0.1, lambda: controller_group.master() is not old_master, "a new master")

        def next_receive():
            try:
                return consumer.receive(2, 15)
            except Exception:  # noqa: BLE001 - the client's own errors while it finds the new master
                return None

        received = check_for(60, 0, next_receive, "a receive from the new master")
        check_m0_again_then_the_rest(consumer, received, leased_until,
                                     "the new master handed out before the old lease ended")
    finally:
        consumer.shutdown()
