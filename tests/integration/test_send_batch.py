"""MessageWriter.SendBatch on a real broker from `quorumq up`: records quorumq's producer encodes
itself are stored with consecutive queue offsets, and a request breaking a rule fails with the
catalogue code of that rule (cluster.proto's error convention) while the broker stores nothing of it
and keeps serving."""

import asyncio
import os
import signal
import uuid

import grpc
import pytest

from harness import SMALL_MESSAGE_SIZE, async_check_for, process_of, start_process, stop_process, wait_registered
from quorumq.client import Message, Producer, PullConsumer
from quorumq.client.errors import ClientError
from quorumq.client.routes import Channels
from quorumq.cluster import cluster_pb2 as pb
from quorumq.cluster import cluster_pb2_grpc as pb_grpc
from quorumq.core import codec
from test_receive_rules import broker_config


@pytest.fixture(scope="module")
def writer(small_message_cluster):
    broker = process_of(small_message_cluster, "broker")
    channel = grpc.insecure_channel(broker["address"], options=[("grpc.max_send_message_length", -1)])
    yield pb_grpc.MessageWriterStub(channel)
    channel.close()


def new_topic() -> str:
    return f"S{uuid.uuid4().hex[:10]}"


def records(topic: str, queue_id: int, *bodies: bytes, id_prefix: str = "ID") -> bytes:
    """Records as the producer encodes them: the broker fills in the offsets and store time."""
    encoded = b""
    for index, body in enumerate(bodies):
        properties = codec.encode_properties({"UNIQ_KEY": f"{id_prefix}{index}"})
        size = codec.record_size(topic.encode(), b"127.0.0.1", properties, body)
        record = bytearray(size)
        codec.encode_record(memoryview(record), 0, size, topic.encode(), queue_id, 0, 0, 1, b"127.0.0.1", 0,
                            properties, body)
        encoded += record
    return encoded


def send(writer, topic: str, queue_id: int, data: bytes, count: int) -> pb.SendBatchResponse:
    return writer.SendBatch(pb.SendBatchRequest(topic=topic, queue_id=queue_id, records=data, count=count),
                            timeout=10)


def test_send_ok_with_consecutive_offsets(writer):
    topic = new_topic()
    first = send(writer, topic, 2, records(topic, 2, b"a", b"b", b"c"), 3)
    second = send(writer, topic, 2, records(topic, 2, b"d", b"e"), 2)
    assert (first.status, first.first_queue_offset, first.count, first.detail) == ("SEND_OK", 0, 3, "")
    assert (second.status, second.first_queue_offset, second.count) == ("SEND_OK", 3, 2)


def test_a_resent_request_is_answered_from_the_first_copy(writer):
    topic = new_topic()
    data = records(topic, 0, b"a", b"b")
    request = pb.SendBatchRequest(topic=topic, queue_id=0, records=data, count=2, request_id="R-" + topic)
    first, resent = writer.SendBatch(request, timeout=10), writer.SendBatch(request, timeout=10)
    other = send(writer, topic, 0, records(topic, 0, b"c"), 1)
    assert [(r.status, r.first_queue_offset, r.count) for r in (first, resent, other)] == [
        ("SEND_OK", 0, 2), ("SEND_OK", 0, 2), ("SEND_OK", 2, 1)]  # stored once: the next send is at 2


def test_a_resend_after_a_restart_is_answered_from_the_copy_in_the_log(writer, small_message_cluster):
    """A master opening its store rebuilds its recent ids from the log: a SendBatch whose answer
    was lost with the process (SIGKILL) is resent, request id = its first record's id, to the
    restarted broker and answered with the first copy's offset; nothing is stored twice."""
    topic, prefix = new_topic(), uuid.uuid4().hex.upper()
    request = pb.SendBatchRequest(topic=topic, queue_id=0, records=records(topic, 0, b"a", b"b", id_prefix=prefix),
                                  count=2, request_id=f"{prefix}0")
    first = writer.SendBatch(request, timeout=10)
    broker = process_of(small_message_cluster, "broker")
    stop_process(broker, signal.SIGKILL)
    start_process(broker)
    wait_registered(small_message_cluster)
    resent = writer.SendBatch(request, timeout=10)
    other = send(writer, topic, 0, records(topic, 0, b"c", id_prefix=prefix + "-"), 1)
    assert [(r.status, r.first_queue_offset, r.count) for r in (first, resent, other)] == [
        ("SEND_OK", 0, 2), ("SEND_OK", 0, 2), ("SEND_OK", 2, 1)]


async def test_the_producer_sends_records_that_read_back_in_order(small_message_cluster):
    access_point, topic = small_message_cluster["access_point"], new_topic()
    sent = [Message(f"m{i}".encode() * 50, tag="t", keys=(f"k{i}",), properties={"i": str(i)}) for i in range(300)]
    async with Producer(access_point, batch_messages=64) as producer:
        results = await producer.send_batch(topic, sent, queue_id=1)
    assert [(r.status, r.queue_offset) for r in results] == [("SEND_OK", i) for i in range(300)]
    async with PullConsumer(access_point, "G") as consumer:
        pulled, offset = [], 0
        while len(pulled) < 300:
            result = await consumer.pull(topic, 1, offset, 128)
            pulled, offset = pulled + result.messages, result.next_offset
    assert [(m.body, m.tag, m.keys, m.properties) for m in pulled] == [
        (m.body, "t", tuple(m.keys), m.properties) for m in sent]
    assert [m.message_id for m in pulled] == [r.message_id for r in results]
    assert all(m.store_timestamp_ms >= m.born_timestamp_ms > 0 and m.store_host for m in pulled)


def test_records_to_a_topic_that_may_not_be_made_are_refused_before_they_are_read(writer, small_message_cluster):
    with broker_config(small_message_cluster, "autoCreateTopicEnable", "false", "true"):
        with pytest.raises(grpc.RpcError) as failed:
            writer.SendBatch(pb.SendBatchRequest(topic=new_topic(), queue_id=0, records=os.urandom(5000), count=2),
                             timeout=10)
    assert ClientError.from_rpc(failed.value).name == "TOPIC_NOT_FOUND"


@pytest.mark.parametrize("case, status", [
    ("illegal topic", "ILLEGAL_TOPIC"),
    ("body too large", "MESSAGE_BODY_TOO_LARGE"),
    ("garbage", "RECORD_CORRUPTED"),
    ("flipped byte", "RECORD_CORRUPTED"),
    ("wrong queue in a record", "BAD_REQUEST"),
    ("no such queue", "BAD_REQUEST"),
    ("negative queue", "BAD_REQUEST"),
    ("count too large", "BATCH_TOO_LARGE"),
    ("request id too long", "ILLEGAL_MESSAGE_ID"),
])
def test_a_bad_request_fails_with_the_code_of_the_rule_and_stores_nothing(writer, case, status):
    topic = new_topic()
    queue_id, count, data = 0, 2, records(topic, 0, b"one", b"two")
    if case == "illegal topic":
        topic = "has space"
    elif case == "body too large":
        data = records(topic, 0, b"ok", b"x" * (SMALL_MESSAGE_SIZE + 1))
    elif case == "garbage":
        data = os.urandom(5000)
    elif case == "flipped byte":
        data = bytearray(data)
        data[-1] ^= 1
        data = bytes(data)
    elif case == "wrong queue in a record":
        data = records(topic, 0, b"one") + records(topic, 1, b"two")
    elif case == "no such queue":
        queue_id, data = 999, records(topic, 999, b"one", b"two")
    elif case == "negative queue":
        queue_id = -1
    elif case == "count too large":
        count = 100_000
    request = pb.SendBatchRequest(topic=topic, queue_id=queue_id, records=data, count=count,
                                  request_id="r" * (1000 if case == "request id too long" else 8))
    with pytest.raises(grpc.RpcError) as failed:
        writer.SendBatch(request, timeout=10)
    refused = ClientError.from_rpc(failed.value)
    assert refused.error is not None and refused.name == status, refused
    assert refused.detail
    if case in ("body too large", "flipped byte", "wrong queue in a record"):
        assert refused.detail.startswith("record 1 of the batch"), refused.detail
    if case != "illegal topic":
        after = send(writer, topic, 0, records(topic, 0, b"still serving"), 1)
        assert (after.status, after.first_queue_offset) == ("SEND_OK", 0), "the refused records took no offset"


async def test_a_request_that_got_no_answer_is_sent_again_counted_and_stored_once(small_message_cluster,
                                                                                    monkeypatch):
    """The broker is stopped while the producer's request waits, so it times out and is sent again
    with the same request id: the result counts two attempts (a resend to another master after a
    failover could store it twice), and the broker, continued, stores it once."""
    access_point, topic = small_message_cluster["access_point"], new_topic()
    broker = process_of(small_message_cluster, "broker")
    async with Producer(access_point, timeout_s=0.5) as producer:
        [warm] = await producer.send_batch(topic, [Message(b"route")], queue_id=0)
        calls = []  # every SendBatch the producer makes from here on, in the order it starts them

        async def counted(channels, address, *args, **kwargs):
            calls.append(address)
            return await real_send(channels, address, *args, **kwargs)

        real_send = Channels.send_batch
        monkeypatch.setattr(Channels, "send_batch", counted)
        os.kill(broker["pid"], signal.SIGSTOP)
        try:
            sending = asyncio.create_task(producer.send_batch(topic, [Message(b"twice?")], queue_id=0))
            # The first request timed out and the second is on its way to the stopped broker.
            await async_check_for(10, 0.01, lambda: len(calls) == 2, "the request sent again")
        finally:
            os.kill(broker["pid"], signal.SIGCONT)
        [result] = await sending
    assert (warm.attempts, result.status, result.attempts) == (1, "SEND_OK", 2)
    async with PullConsumer(access_point, "G") as consumer:
        pulled = await consumer.pull(topic, 0, 0, 16)
    assert [m.body for m in pulled.messages] == [b"route", b"twice?"]
