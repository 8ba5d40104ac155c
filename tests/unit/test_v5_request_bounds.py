"""The v5 requests' bounds (protocol/v5.py REQUEST_BOUNDS, listen.py RequestBound), checked on their
bytes: the largest legal requests pass, and each way past a bound gets its error."""

import pytest
from rocketmq.grpc_protocol import definition_pb2 as v5
from rocketmq.grpc_protocol import service_pb2 as v5s

from quorumq import limits
from quorumq.core.wire_fields import WireError
from quorumq.errors import Error, QuorumqError
from quorumq.protocol.v5 import REQUEST_BOUNDS

SEND, ACK = "/apache.rocketmq.v2.MessagingService/SendMessage", "/apache.rocketmq.v2.MessagingService/AckMessage"
# A SendMessage above this many bytes could hold more fields than its messages may: they are counted.
COUNTED_BYTES = 2 * limits.BATCH_MESSAGES_MAX * limits.MESSAGE_FIELDS_MAX


def refusal(method: str, raw: bytes) -> Error | None:
    refused = REQUEST_BOUNDS[method].refusal(raw, method)
    return None if refused is None else refused.error


def fullest_message(body: bytes = b"x") -> v5.Message:
    """A message with every field a rule allows: 128 properties, 32 keys, every system property."""
    system = v5.SystemProperties(keys=[f"k{i}" for i in range(limits.KEYS_PER_MESSAGE_MAX)])
    for field in v5.SystemProperties.DESCRIPTOR.fields:
        if field.name == "keys":
            continue
        if field.message_type is not None:
            getattr(system, field.name).SetInParent()
        elif field.type == field.TYPE_STRING:
            setattr(system, field.name, "s")
        else:  # numbers and enums
            setattr(system, field.name, 1)
    return v5.Message(topic=v5.Resource(name="T"), body=body, system_properties=system,
                      user_properties={f"p{i}": "v" for i in range(limits.PROPERTY_COUNT_MAX)})


def test_the_largest_legal_sends_pass():
    full = v5s.SendMessageRequest(messages=[fullest_message()] * limits.BATCH_MESSAGES_MAX).SerializeToString()
    assert len(full) > COUNTED_BYTES  # its messages' fields are counted
    assert refusal(SEND, full) is None
    big = v5s.SendMessageRequest(messages=[fullest_message(bytes(limits.BATCH_BYTES_MAX // 16))] * 16)
    assert refusal(SEND, big.SerializeToString()) is None


def test_sends_past_a_bound():
    assert refusal(SEND, b"\x0a\x00" * (limits.BATCH_MESSAGES_MAX + 1)) is Error.BATCH_TOO_LARGE
    assert refusal(SEND, b"\x0a\x00" * 2_000_000) is Error.BATCH_TOO_LARGE
    junk = b"\x10\x01" * (limits.BATCH_MESSAGES_MAX + limits.REQUEST_OTHER_FIELDS_MAX + 1)  # unknown fields
    assert refusal(SEND, junk) is Error.REQUEST_TOO_LARGE
    def keys(count: int, body: bytes = b"") -> bytes:
        return v5s.SendMessageRequest(messages=[v5.Message(body=body, system_properties=v5.SystemProperties(
            keys=[""] * count))]).SerializeToString()

    assert refusal(SEND, keys(COUNTED_BYTES // 2)) is Error.REQUEST_TOO_LARGE
    # In a large request, one message past its fields: it has a body and its keys (the rest is its body).
    assert refusal(SEND, keys(limits.MESSAGE_FIELDS_MAX - 2, bytes(COUNTED_BYTES))) is None
    assert refusal(SEND, keys(limits.MESSAGE_FIELDS_MAX - 1, bytes(COUNTED_BYTES))) is Error.REQUEST_TOO_LARGE
    # A small request is bounded by its size: its keys are the handler's rule (ILLEGAL_MESSAGE_KEY per entry).
    assert refusal(SEND, keys(1000)) is None
    with pytest.raises(WireError):
        refusal(SEND, b"\x0a\x05ab")


def test_acks_and_every_other_request_by_size_and_entries():
    entry = v5s.AckMessageEntry(message_id="0" * 34, receipt_handle="h" * 64)
    ack = v5s.AckMessageRequest(group=v5.Resource(name="G" * 127), topic=v5.Resource(name="T" * 127))
    ack.entries.extend([entry] * limits.ACK_ENTRIES_MAX)
    assert refusal(ACK, ack.SerializeToString()) is None
    ack.entries.append(entry)
    assert refusal(ACK, ack.SerializeToString()) is Error.BATCH_TOO_LARGE
    assert refusal(ACK, b"\x1a\x00" * 300_000) is Error.REQUEST_TOO_LARGE
    for method, bound in REQUEST_BOUNDS.items():
        if method != SEND:
            assert bound.bytes_max == limits.REQUEST_BYTES_MAX
            at_most = b"\x7a\xfc\xff\x0f" + bytes(limits.REQUEST_BYTES_MAX - 4)  # one unknown field, 256 KiB in all
            assert refusal(method, at_most) is None
            assert refusal(method, bytes(limits.REQUEST_BYTES_MAX + 1)) is Error.REQUEST_TOO_LARGE


def test_a_refusal_is_the_methods_answer_with_its_v5_status():
    answer = REQUEST_BOUNDS[SEND].answer(QuorumqError(Error.BATCH_TOO_LARGE, "a request carries 1..1024 messages"))
    assert isinstance(answer, v5s.SendMessageResponse) and answer.status.code == v5.Code.PAYLOAD_TOO_LARGE
    assert answer.status.message == "BATCH_TOO_LARGE: a request carries 1..1024 messages"
