"""Requests too large for their method are refused before protobuf parses them: a broker's memory
stays bounded under hostile requests, it keeps serving, and every acknowledged message is kept."""

import uuid
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest
from rocketmq.grpc_protocol import definition_pb2 as v5
from rocketmq.grpc_protocol import service_pb2 as v5s
from rocketmq.grpc_protocol import service_pb2_grpc as v5_grpc

from harness import (
    MESSAGING_SERVICE,
    SMALL_MESSAGE_SIZE,
    configuration,
    log_end,
    log_since,
    official_message,
    peak_rss_bytes,
    process_of,
    started_producer,
)
from quorumq import limits
from quorumq.client import ClientError
from quorumq.errors import Error

EMPTY_MESSAGES = 2_000_000  # 4 MB on the wire; parsed, 150 MB of objects each
AT_ONCE = 3  # of those, in flight together
EMPTY_KEYS = 1_000_000  # of one message, 2 MB on the wire: 1M strings parsed


def unknown_field(size: int) -> bytes:
    """A field no request has (number 15, bytes), `size` bytes long in all: protobuf keeps it unread."""
    tag, length = b"\x7a", size - 1 - 5
    return tag + bytes([length & 0x7F | 0x80, length >> 7 & 0x7F | 0x80, length >> 14 & 0x7F | 0x80,
                        length >> 21 & 0x7F | 0x80, length >> 28]) + bytes(length)


def ack_request(entries: int, entry: bytes) -> bytes:
    head = v5s.AckMessageRequest(group=v5.Resource(name="G"), topic=v5.Resource(name="Bounded"))
    return head.SerializeToString() + (b"\x1a" + bytes([len(entry)]) + entry) * entries


def test_hostile_requests_are_refused_unparsed_and_the_broker_stays_small(start_cluster):
    cluster = start_cluster(sets={"maxMessageSize": str(SMALL_MESSAGE_SIZE)})
    broker = process_of(cluster, "broker")
    logged_before = log_end(broker)
    channel = grpc.insecure_channel(broker["address"], options=[("grpc.max_send_message_length", -1),
                                                               ("grpc.max_receive_message_length", -1)])

    def call(method: str, raw: bytes):
        rpc = channel.unary_unary(MESSAGING_SERVICE + method, request_serializer=lambda data: data,
                                  response_deserializer=getattr(v5s, f"{method}Response").FromString)
        return rpc(raw, timeout=30)

    producer = started_producer(configuration(cluster))
    topic = f"Bounded{uuid.uuid4().hex[:8]}"
    sent = set()

    def send_some(label: str, count: int) -> None:
        for index in range(count):
            body = f"{label}-{index}".encode()
            producer.send(official_message(topic, body))  # raises unless acknowledged
            sent.add(body)

    try:
        send_some("before", 20)
        junk_entry = v5s.AckMessageEntry(message_id="m", receipt_handle="junk").SerializeToString()
        empty_keys = v5s.SendMessageRequest(messages=[v5.Message(system_properties=v5.SystemProperties(
            keys=[""] * EMPTY_KEYS))]).SerializeToString()
        hostile = [("SendMessage", b"\x0a\x00" * EMPTY_MESSAGES)] * AT_ONCE + [
            ("SendMessage", empty_keys),  # one message, its keys past every bound
            ("AckMessage", ack_request(300_000, b"")),  # 600 KB of empty entries
            ("AckMessage", ack_request(limits.ACK_ENTRIES_MAX + 1, junk_entry)),  # 13 KB, one entry too many
            ("Heartbeat", unknown_field(limits.REQUEST_BYTES_MAX + 1)),
        ]
        with ThreadPoolExecutor(len(hostile)) as pool:
            answers = [pool.submit(call, method, raw) for method, raw in hostile]
            send_some("during", 20)  # another client, served meanwhile
            answers = [answer.result() for answer in answers]
        for answer in answers[:AT_ONCE]:
            assert answer.status.code == v5.Code.PAYLOAD_TOO_LARGE, answer.status
            assert answer.status.message == (
                f"BATCH_TOO_LARGE: a request carries 1..{limits.BATCH_MESSAGES_MAX} messages")
        too_many_keys, too_many_bytes, too_many_entries, heartbeat = answers[AT_ONCE:]
        assert too_many_keys.status.code == v5.Code.PAYLOAD_TOO_LARGE, too_many_keys.status
        top_level = limits.BATCH_MESSAGES_MAX + limits.REQUEST_OTHER_FIELDS_MAX
        assert too_many_keys.status.message == (
            f"REQUEST_TOO_LARGE: SendMessage: a request holds at most {top_level} fields at its top level and "
            f"{limits.MESSAGE_FIELDS_MAX} within each of its messages")
        assert too_many_bytes.status.code == v5.Code.PAYLOAD_TOO_LARGE, too_many_bytes.status
        assert too_many_bytes.status.message.startswith(
            f"REQUEST_TOO_LARGE: AckMessage: a request takes at most {limits.REQUEST_BYTES_MAX} bytes")
        assert not too_many_bytes.entries  # the answer is one status, not an entry per request entry
        assert too_many_entries.status.code == v5.Code.PAYLOAD_TOO_LARGE, too_many_entries.status
        assert "BATCH_TOO_LARGE" in too_many_entries.status.message and not too_many_entries.entries
        assert heartbeat.status.code == v5.Code.PAYLOAD_TOO_LARGE, heartbeat.status

        # Past gRPC's receive limit, which follows maxMessageSize (and the batch limit).
        with pytest.raises(grpc.RpcError) as refused:
            call("SendMessage", unknown_field(limits.grpc_receive_bytes(SMALL_MESSAGE_SIZE) + 1))
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, refused.value
        # An answer stream carries the refusal as its one answer.
        receive = channel.unary_stream(MESSAGING_SERVICE + "ReceiveMessage", request_serializer=lambda data: data,
                                       response_deserializer=v5s.ReceiveMessageResponse.FromString)
        [received] = list(receive(unknown_field(limits.REQUEST_BYTES_MAX + 1), timeout=10))
        assert received.status.code == v5.Code.PAYLOAD_TOO_LARGE, received
        # A request stream's command past its bound ends the stream: no v5 answer fits it.
        telemetry = channel.stream_stream(MESSAGING_SERVICE + "Telemetry", request_serializer=lambda data: data,
                                          response_deserializer=v5s.TelemetryCommand.FromString)
        with pytest.raises(grpc.RpcError) as refused:
            list(telemetry(iter([unknown_field(limits.REQUEST_BYTES_MAX + 1)]), timeout=10))
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, refused.value
        assert ClientError.from_rpc(refused.value).error is Error.REQUEST_TOO_LARGE, refused.value

        send_some("after", 20)
        peak = peak_rss_bytes(broker["pid"])
        assert peak < limits.HOSTILE_LOAD_RSS_BYTES_MAX, f"broker peak RSS {peak >> 20} MiB"
    finally:
        producer.shutdown()
        channel.close()

    logged = log_since(broker, logged_before)
    assert "Traceback" not in logged, logged
    assert logged.count("refused unparsed") == len(hostile) + 2, logged  # and ReceiveMessage, Telemetry

    with grpc.insecure_channel(broker["address"]) as reader:
        stub, stored = v5_grpc.MessagingServiceStub(reader), set()
        for queue_id in range(8):
            answers = stub.PullMessage(v5s.PullMessageRequest(
                group=v5.Resource(name="G"), message_queue=v5.MessageQueue(topic=v5.Resource(name=topic), id=queue_id),
                offset=0, batch_size=100), timeout=10)
            stored |= {answer.message.body for answer in answers if answer.HasField("message")}
    assert stored == sent, f"acknowledged but not read back: {sorted(sent - stored)[:5]}"
