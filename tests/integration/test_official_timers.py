"""Delay (timer) messages through the official RocketMQ 5 Python client (issue 21).

Goal: what an application sees of a message sent with a delivery timestamp to a DELAY topic. It is
received once, never before its time and at most timerPrecisionMs plus a margin after it, for
delays of 1 s to 60 s; a timestamp in the past is delivered at once; the client's milliseconds in
the seconds field (spec grpc-client.md) and real seconds both work; a receive waiting on the topic
is woken by the due timer; RecallMessage through the access point cancels a pending timer and
refuses one delivered, recalled, unparsable or of another topic; a timestamp past
timerMaxDelaySec, and a delay message to a NORMAL topic, are refused and store nothing; and the
timers pending when the broker is SIGKILLed are all delivered after its restart.

Method: one broker with the default timerPrecisionMs (1000) and timerMaxDelaySec (3 days). A
consumer of a group of its own receives in a thread and keeps each message's wall-clock arrival
time; a timer's lateness is that minus its due time (one clock: every process runs on this
machine). The 30 s and 60 s timers are sent when the module starts and checked by its last test,
so the module lasts about a minute.
"""

import signal
import statistics
import uuid

import pytest
from rocketmq.grpc_protocol import definition_pb2 as v5
from rocketmq.v5.exception import ClientException

from harness import (
    check_for,
    configuration,
    new_name,
    process_of,
    restart_process,
    simple_consumer,
    started_producer,
    typed_topic,
    v5_send,
    wait_registered,
)
from quorumq.client import AdminClient, Blocking
from timer_transaction_support import Arrivals, now_ms, timer_message, timers_stored

PRECISION_MS = 1000  # timerPrecisionMs, the broker's default
LATE_MS = PRECISION_MS + 2500  # a generous margin for a loaded 2-core machine; the target p99 is 1250 ms
MAX_DELAY_S = 259_200  # timerMaxDelaySec, the broker's default
SHORT_DELAYS_S = (1, 2, 5, 10)
LONG_DELAYS_S = (30, 60)  # sent at the module's start, checked last
WAKE_TIMERS = 5
WOKEN_MS = 300  # the median lateness of a woken receive: about 5 ms here


@pytest.fixture(scope="module")
def config(shared_cluster):
    return configuration(shared_cluster)


@pytest.fixture(scope="module")
def timer_producer(config):
    producer = started_producer(config)
    yield producer
    producer.shutdown()


@pytest.fixture
def delay_topic(admin, masters) -> str:
    return typed_topic(admin, masters, "DELAY")


@pytest.fixture
def arrivals(config, delay_topic):
    watching = Arrivals(config, delay_topic)
    yield watching
    watching.close()


class Sent:
    """The timers a test sent: message id -> (body, due ms), and the receipts."""

    def __init__(self) -> None:
        self.due: dict[str, tuple[bytes, int]] = {}
        self.receipts: dict[bytes, object] = {}

    def send(self, producer, topic: str, body: bytes, due_ms: int):
        receipt = producer.send(timer_message(topic, body, due_ms))
        self.due[receipt.message_id] = (body, due_ms)
        self.receipts[body] = receipt
        return receipt


def assert_on_time(arrivals: Arrivals, sent: Sent, timeout: float, from_ms: int = 0) -> None:
    """Every timer of `sent` received once, as a DELAY message with its delivery time, never
    before it and at most LATE_MS after it, or after `from_ms` if that is later (when the broker
    came back, when a timer already due was sent)."""
    arrivals.wait_for(list(sent.due), timeout)
    arrivals.wait_rounds()  # a second delivery would have come by now
    for message_id, (body, due_ms) in sent.due.items():
        deliveries = arrivals.of(message_id)
        assert len(deliveries) == 1, f"{body!r} delivered {len(deliveries)} times"
        [(at_ms, message)] = deliveries
        assert message.body == body
        assert (message.message_type, message.delivery_timestamp) == (v5.MessageType.DELAY, due_ms), body
        assert at_ms >= due_ms, f"{body!r} delivered {due_ms - at_ms} ms before its time"
        assert at_ms - max(due_ms, from_ms) <= LATE_MS, f"{body!r} delivered {at_ms - max(due_ms, from_ms)} ms late"


@pytest.fixture(scope="module")
def long_timers(config, admin, masters, timer_producer):
    """The 30 s and 60 s timers, sent when the module starts."""
    topic = typed_topic(admin, masters, "DELAY")
    watching = Arrivals(config, topic)
    sent = Sent()
    try:
        for delay in LONG_DELAYS_S:
            receipt = sent.send(timer_producer, topic, f"{delay}s".encode(), now_ms() + delay * 1000)
            assert isinstance(receipt.recall_handle, str) and receipt.recall_handle
        yield watching, sent
    finally:
        watching.close()


def test_timers_of_1_s_to_10_s_are_delivered_within_precision(long_timers, timer_producer, delay_topic, arrivals):
    sent = Sent()
    for delay in SHORT_DELAYS_S:
        receipt = sent.send(timer_producer, delay_topic, f"{delay}s".encode(), now_ms() + delay * 1000)
        assert isinstance(receipt.recall_handle, str) and receipt.recall_handle
    assert_on_time(arrivals, sent, timeout=max(SHORT_DELAYS_S) + 10)


def test_a_timestamp_in_the_past_is_delivered_at_once(timer_producer, delay_topic, arrivals):
    sent, sent_at = Sent(), now_ms()
    sent.send(timer_producer, delay_topic, b"past", sent_at - 60_000)
    assert_on_time(arrivals, sent, timeout=10, from_ms=sent_at)


def test_real_seconds_in_a_raw_send_work_too(shared_cluster, delay_topic, arrivals):
    """The field's own unit (a Java or Go client sends it right): seconds and nanos."""
    due_ms = now_ms() + 2000
    message = raw_timer(delay_topic, b"seconds")
    message.system_properties.delivery_timestamp.FromMilliseconds(due_ms)
    response = v5_send(process_of(shared_cluster, "broker")["address"], message)
    assert response.status.code == v5.Code.OK, response.status
    assert response.entries[0].recall_handle
    sent = Sent()
    sent.due[message.system_properties.message_id] = (b"seconds", due_ms)
    assert_on_time(arrivals, sent, timeout=12)


def test_a_receive_waiting_on_the_topic_is_woken_by_a_due_timer(config, timer_producer, delay_topic):
    """Each receive, a long poll of 20 s begun before its timer is due, is answered as the timer
    comes due. A long poll also looks again every second (for expired leases), so an answer within
    the precision alone does not show the wake; the median lateness does: about 5 ms woken, about
    500 ms when a poll only looks again."""
    consumer = simple_consumer(config, new_name("G"), delay_topic, await_duration=20)
    try:
        first_ms = now_ms() + 1500
        due = {}  # message id -> due ms, spread over the poll's second
        for index in range(WAKE_TIMERS):
            due_ms = first_ms + index * 1000 // WAKE_TIMERS
            due[timer_producer.send(timer_message(delay_topic, b"wake", due_ms)).message_id] = due_ms
        lateness = []
        for _ in due:
            [message] = consumer.receive(1, 30)
            lateness.append(now_ms() - due[message.message_id])
            consumer.ack(message)
        assert all(0 <= late <= LATE_MS for late in lateness), lateness
        assert statistics.median(lateness) <= WOKEN_MS, f"not woken: {lateness} ms late"
    finally:
        consumer.shutdown()


def test_a_recalled_timer_is_never_delivered_and_a_second_recall_is_refused(
        shared_cluster, timer_producer, delay_topic, arrivals):
    status_before = broker_status(shared_cluster)
    recalled = timer_producer.send(timer_message(delay_topic, b"recalled", now_ms() + 3000))
    control = Sent()  # due after the recalled one: once it arrived, the recalled one would have
    control.send(timer_producer, delay_topic, b"control", now_ms() + 4000)
    assert timer_producer.recall_message(delay_topic, recalled.recall_handle) == recalled.message_id
    assert_on_time(arrivals, control, timeout=15)
    assert b"recalled" not in arrivals.bodies()
    for handle, what in ((recalled.recall_handle, "a recalled timer"),
                         (control.receipts[b"control"].recall_handle, "a delivered timer")):
        with pytest.raises(ClientException) as refused:
            timer_producer.recall_message(delay_topic, handle)
        assert refused.value.code == v5.Code.NOT_FOUND and "TIMER_NOT_PENDING" in str(refused.value), what
    status = broker_status(shared_cluster)
    assert int(status["timersRecalled"]) == int(status_before["timersRecalled"]) + 1


def test_a_bad_recall_handle_or_another_topics_is_refused_and_cancels_nothing(
        admin, masters, timer_producer, delay_topic, arrivals):
    other_topic = typed_topic(admin, masters, "DELAY")
    sent = Sent()
    receipt = sent.send(timer_producer, delay_topic, b"kept", now_ms() + 3000)
    for topic, handle in ((delay_topic, "not-a-recall-handle"), (other_topic, receipt.recall_handle)):
        with pytest.raises(ClientException) as refused:
            timer_producer.recall_message(topic, handle)
        assert refused.value.code == v5.Code.BAD_REQUEST and "INVALID_RECALL_HANDLE" in str(refused.value), topic
    assert_on_time(arrivals, sent, timeout=15)


def test_a_timestamp_past_timer_max_delay_sec_is_refused_and_stores_nothing(shared_cluster, timer_producer,
                                                                           delay_topic):
    broker = process_of(shared_cluster, "broker")["address"]
    stored_before = timers_stored(broker_status(shared_cluster))
    too_far_ms = now_ms() + (MAX_DELAY_S + 3600) * 1000
    with pytest.raises(ClientException) as refused:
        timer_producer.send(timer_message(delay_topic, b"too far", too_far_ms))
    assert refused.value.code == v5.Code.ILLEGAL_DELIVERY_TIME, refused.value
    # The same through a raw send, in real seconds: the entry's answer too.
    message = raw_timer(delay_topic, b"too far")
    message.system_properties.delivery_timestamp.FromMilliseconds(too_far_ms)
    response = v5_send(broker, message)
    assert response.status.code == response.entries[0].status.code == v5.Code.ILLEGAL_DELIVERY_TIME
    assert "ILLEGAL_DELIVERY_TIME" in response.status.message
    assert timers_stored(broker_status(shared_cluster)) == stored_before, "a refused timer was stored"
    # Just inside the limit is taken (and recalled, so the broker does not keep it for 3 days).
    inside = timer_producer.send(timer_message(delay_topic, b"far", now_ms() + (MAX_DELAY_S - 3600) * 1000))
    assert timer_producer.recall_message(delay_topic, inside.recall_handle) == inside.message_id


def test_a_delay_message_to_a_normal_topic_is_refused_and_stores_nothing(shared_cluster, admin, masters,
                                                                        timer_producer):
    normal = typed_topic(admin, masters, "NORMAL", queues=1)
    with pytest.raises(Exception, match="message type"):  # the official client's own check, from the route
        timer_producer.send(timer_message(normal, b"delayed", now_ms() + 1000))
    stored_before = timers_stored(broker_status(shared_cluster))
    message = raw_timer(normal, b"delayed")
    message.system_properties.delivery_timestamp.seconds = now_ms() + 1000  # ms, as the official client sends it
    response = v5_send(process_of(shared_cluster, "broker")["address"], message)
    assert response.status.code == v5.Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, response.status
    assert timers_stored(broker_status(shared_cluster)) == stored_before, "a refused timer was stored"
    assert [q.max_offset for p in admin.consumer_progress("nobody", normal) for q in p.queues] == [0]


def test_timers_pending_when_the_broker_is_killed_are_all_delivered_after_its_restart(start_cluster):
    cluster = start_cluster()
    wait_registered(cluster)
    config = configuration(cluster)
    with Blocking(AdminClient, cluster["access_point"]) as admin:
        topic = typed_topic(admin, [b.address for b in admin.brokers(masters_only=True)], "DELAY")
    producer = started_producer(config)
    sent = Sent()
    try:
        for delay in (1, 3, 8, 12):
            sent.send(producer, topic, f"{delay}s".encode(), now_ms() + delay * 1000)
    finally:
        producer.shutdown()
    broker = process_of(cluster, "broker")
    restart_process(cluster, broker, signal.SIGKILL)
    wait_registered(cluster)
    arrivals = Arrivals(config, topic)
    try:
        # A timer due while the broker was down comes once it is back, at most LATE_MS later.
        assert_on_time(arrivals, sent, timeout=30, from_ms=now_ms())
    finally:
        arrivals.close()
    check_for(10, 0.1, lambda: broker_status(cluster)["timersPending"] == "0", "no timer pending")


def test_the_30_s_and_60_s_timers_sent_at_the_start_are_delivered_within_precision(long_timers):
    arrivals, sent = long_timers
    assert_on_time(arrivals, sent, timeout=max(LONG_DELAYS_S) + 10)


def broker_status(cluster: dict) -> dict[str, str]:
    with Blocking(AdminClient, cluster["access_point"]) as admin:
        return admin.broker_status(process_of(cluster, "broker")["address"])


def raw_timer(topic: str, body: bytes) -> v5.Message:
    """A delay message for a raw v5 send; the caller sets its delivery_timestamp."""
    return v5.Message(topic=v5.Resource(name=topic), body=body, system_properties=v5.SystemProperties(
        message_id=uuid.uuid4().hex.upper(), message_type=v5.MessageType.DELAY, body_encoding=v5.Encoding.IDENTITY))
