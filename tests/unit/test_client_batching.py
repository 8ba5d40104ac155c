"""The client's pure parts: splitting batches, message ids, naming a v5 status's error."""

import re

from rocketmq.grpc_protocol import definition_pb2 as v5

from quorumq import limits
from quorumq.client.errors import ClientError
from quorumq.client.producer import MESSAGE_OVERHEAD_BYTES, Message, batches, new_message_id


def test_batches_respect_the_message_count():
    messages = [Message(b"x") for _ in range(2500)]
    runs = batches(messages, limits.BATCH_MESSAGES_MAX, limits.BATCH_BYTES_MAX)
    assert [len(run) for run in runs] == [1024, 1024, 452]
    assert [m for run in runs for m in run] == messages, "order and identity are kept"


def test_batches_respect_the_byte_budget_and_send_an_oversized_message_alone():
    big = limits.BATCH_BYTES_MAX // 2 - MESSAGE_OVERHEAD_BYTES
    messages = [Message(b"a" * big), Message(b"b" * big), Message(b"c"), Message(b"d" * (limits.BATCH_BYTES_MAX + 1)),
                Message(b"e")]
    runs = batches(messages, limits.BATCH_MESSAGES_MAX, limits.BATCH_BYTES_MAX)
    assert [[m.body[:1] for m in run] for run in runs] == [[b"a", b"b"], [b"c"], [b"d"], [b"e"]]


def test_batches_of_nothing():
    assert batches([], 10, 100) == []


def test_message_ids_are_32_upper_hex_and_unique():
    ids = [new_message_id() for _ in range(10_000)]
    assert all(re.fullmatch(r"[0-9A-F]{32}", message_id) for message_id in ids)
    assert len(set(ids)) == len(ids)


def test_a_bare_key_is_one_key():
    assert Message(b"x", keys="order-1").keys == ("order-1",)


def test_client_error_falls_back_to_the_v5_code_name():
    error = ClientError.from_status(v5.Status(code=v5.Code.ILLEGAL_TOPIC, message="topic a b is illegal"))
    assert (error.name, error.code, str(error)) == ("ILLEGAL_TOPIC", v5.Code.ILLEGAL_TOPIC,
                                                    "ILLEGAL_TOPIC: topic a b is illegal")
    assert not error.unreachable
