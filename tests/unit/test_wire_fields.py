"""Counting fields in a request's wire bytes (core/wire_fields.py) agrees with protobuf's parser on
every message it parses, refuses only bytes that parser refuses too, and stops past its bounds."""

import random

import pytest
from google.protobuf.message import DecodeError
from rocketmq.grpc_protocol import definition_pb2 as v5
from rocketmq.grpc_protocol import service_pb2 as v5s

from quorumq.core.wire_fields import FIELD_NUMBER_MAX, WireError, count_field

MESSAGES, ENTRIES = 1, 3  # SendMessageRequest.messages, AckMessageRequest.entries
SEND_SHAPE = {MESSAGES: {3: {}}}  # a large SendMessage's fields: its messages' and their system properties'
MANY = 10**9  # a bound no test reaches


def walk(raw: bytes, number: int = MESSAGES, count_max: int = MANY, fields_max: int = MANY, enter=None,
         entry_fields_max: int = MANY):
    return count_field(raw, number, count_max, fields_max, enter, entry_fields_max)


def varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    return bytes(out + bytes([value]))


def tag(field: int, wire_type: int) -> bytes:
    return varint(field << 3 | wire_type)


def length_delimited(field: int, content: bytes) -> bytes:
    return tag(field, 2) + varint(len(content)) + content


def message(properties: int = 1, keys: int = 2) -> v5.Message:
    return v5.Message(topic=v5.Resource(name="T"), body=b"x", user_properties={f"k{i}": "v" for i in range(properties)},
                      system_properties=v5.SystemProperties(message_id="ID", keys=["k"] * keys))


def send_request(count: int, **shape) -> bytes:
    return v5s.SendMessageRequest(messages=[message(**shape)] * count).SerializeToString()


def ack_request(count: int) -> bytes:
    return v5s.AckMessageRequest(group=v5.Resource(name="G"), topic=v5.Resource(name="T"), entries=[
        v5s.AckMessageEntry(message_id=f"m{i}", receipt_handle=f"h{i}") for i in range(count)]).SerializeToString()


def parsed_count(raw: bytes, request_type=v5s.SendMessageRequest, field="messages") -> int | None:
    try:
        return len(getattr(request_type.FromString(raw), field))
    except DecodeError:
        return None


@pytest.mark.parametrize("count", [0, 1, 2, 1024, 1025])
def test_counts_what_the_parser_builds(count):
    assert walk(send_request(count)) == count
    assert walk(send_request(count), enter=SEND_SHAPE) == count
    assert walk(ack_request(count), ENTRIES) == count
    assert walk(b"\x0a\x00" * count) == count  # empty messages, 2 bytes each


def test_the_walk_stops_past_its_bounds_whatever_the_size():
    huge = b"\x0a\x00" * 2_000_000
    assert walk(huge, count_max=1024) == 1025  # one past the bound: stopped there
    assert walk(huge, count_max=1024, fields_max=1025, enter=SEND_SHAPE) == 1025
    assert walk(huge, fields_max=1040) is None
    assert walk(b"\x0a\x00" * 1024, count_max=1024, fields_max=1024) == 1024
    # Other fields count towards the bound too: a million unknown fields cannot make it walk a million.
    assert walk(b"\x10\x01" * 1_000_000 + b"\x0a\x00", fields_max=16) is None
    assert walk(ack_request(3), ENTRIES, fields_max=4) is None  # group, topic and 3 entries are 5 fields


def test_an_entered_message_counts_its_fields_and_its_entered_submessages():
    one = send_request(1, properties=3, keys=5)  # topic, 3 properties, system properties (id, 5 keys), body
    assert walk(one, fields_max=1, entry_fields_max=0) == 1  # the top level alone
    assert walk(one, fields_max=1, entry_fields_max=12, enter=SEND_SHAPE) == 1
    assert walk(one, fields_max=1, entry_fields_max=11, enter=SEND_SHAPE) is None
    # Each entry has a budget of its own: three such messages pass where one would at 12.
    assert walk(send_request(3, properties=3, keys=5), fields_max=3, entry_fields_max=12, enter=SEND_SHAPE) == 3
    # 17 MiB of empty keys in one message: one field at the top, millions within; the walk stops at 193.
    keys = length_delimited(MESSAGES, length_delimited(3, b"\x12\x00" * 1_000_000))
    assert walk(keys, count_max=1024, fields_max=1040) == 1
    assert walk(keys, count_max=1024, fields_max=1040, enter=SEND_SHAPE, entry_fields_max=192) is None
    # Each occurrence of a singular message is entered (the parser merges their keys).
    twice = length_delimited(MESSAGES, length_delimited(3, b"\x12\x00" * 3) * 2)
    assert walk(twice, entry_fields_max=8, enter=SEND_SHAPE) == 1 == parsed_count(twice)
    assert walk(twice, entry_fields_max=7, enter=SEND_SHAPE) is None
    assert len(v5s.SendMessageRequest.FromString(twice).messages[0].system_properties.keys) == 6


def test_an_entered_message_must_be_one():
    cut = length_delimited(MESSAGES, length_delimited(3, b"\x12\x05ab"))  # a key cut short within
    assert walk(cut) == 1  # not entered: the walk cannot tell
    with pytest.raises(WireError):
        walk(cut, enter=SEND_SHAPE)
    assert parsed_count(cut) is None
    crossing = length_delimited(MESSAGES, b"\x08") + b"\x05"  # a varint that crosses the message's end
    with pytest.raises(WireError):
        walk(crossing, enter=SEND_SHAPE)
    assert parsed_count(crossing) is None


def test_only_length_delimited_fields_of_the_number_count():
    raw = (tag(1, 0) + varint(5) + tag(1, 1) + bytes(8) + tag(1, 5) + bytes(4)  # field 1, other wire types
           + length_delimited(2, b"abc") + length_delimited(1, b""))
    assert walk(raw) == 1 == parsed_count(raw)
    assert walk(raw, enter=SEND_SHAPE) == 1


def test_groups_are_walked_through_and_their_fields_not_counted_nor_entered():
    inside = length_delimited(1, b"") + tag(7, 3) + length_delimited(1, b"") + tag(7, 4)  # a nested group
    raw = tag(5, 3) + inside + tag(5, 4) + length_delimited(1, b"")
    assert walk(raw) == 1 == parsed_count(raw)
    assert walk(raw, fields_max=6) is None  # the group's 6 fields count towards the bound
    assert walk(tag(1, 3) + tag(1, 4)) == 0 == parsed_count(tag(1, 3) + tag(1, 4))
    hidden = tag(1, 3) + length_delimited(1, b"\x12\x05ab") + tag(1, 4)  # no message: never entered
    assert walk(hidden, enter=SEND_SHAPE) == 0 == parsed_count(hidden)


@pytest.mark.parametrize("raw, why", [
    (b"\x0a", "a length cut short"),
    (b"\x0a\x05ab", "a value cut short"),
    (b"\x0a\x80", "a length varint cut short"),
    (b"\x88", "a tag varint cut short"),
    (b"\x08\xff\xff", "a varint value cut short"),
    (b"\x08" + b"\xff" * 10 + b"\x01", "a varint of 11 bytes"),
    (b"\x09" + bytes(7), "a fixed64 cut short"),
    (b"\x0d" + bytes(3), "a fixed32 cut short"),
    (b"\x02\x00", "field number 0"),
    (varint((FIELD_NUMBER_MAX + 1) << 3 | 2) + b"\x00", "a field number above 2**29 - 1"),
    (b"\x0e", "wire type 6"),
    (b"\x0f", "wire type 7"),
    (tag(5, 4), "a group's end without its start"),
    (tag(5, 3) + tag(6, 4), "a group ended by another's end"),
    (tag(5, 3) + b"\x0a\x00", "a group without its end"),
    (b"\x0a\x00" * 3 + b"\x0a\x03ab", "a good start and a truncated end"),
    (length_delimited(MESSAGES, tag(5, 3)), "a group left open at an entered message's end"),
])
def test_bytes_that_are_no_message_are_refused_as_the_parser_refuses_them(raw, why):
    with pytest.raises(WireError):
        walk(raw, enter=SEND_SHAPE)
    assert parsed_count(raw) is None, why


def test_overlong_but_legal_varints_are_read():
    raw = b"\x8a\x80\x00" + b"\x80\x00" + tag(2, 0) + b"\xff" * 9 + b"\x01"  # tag and length padded; a 10-byte varint
    assert walk(raw) == 1 == parsed_count(raw)


def test_empty_bytes_are_an_empty_message():
    assert walk(b"") == 0 == parsed_count(b"")
    assert walk(b"", fields_max=0) == 0


@pytest.mark.parametrize("seed", range(4))
def test_mutated_requests_agree_with_the_parser(seed):
    """Every request protobuf parses is counted exactly; every refusal is one protobuf makes too."""
    rng = random.Random(seed)
    cases = ((v5s.SendMessageRequest, "messages", MESSAGES, SEND_SHAPE, send_request),
             (v5s.AckMessageRequest, "entries", ENTRIES, None, ack_request))
    for request_type, field, number, shape, build in cases:
        for _ in range(500):
            raw = bytearray(build(rng.randrange(4)))
            for _ in range(rng.randrange(1, 4)):
                action = rng.randrange(3)
                if action == 0 and raw:
                    raw[rng.randrange(len(raw))] = rng.randrange(256)
                elif action == 1 and raw:
                    del raw[rng.randrange(len(raw)):][:rng.randrange(1, 4)]
                else:
                    raw[rng.randrange(len(raw) + 1):0] = rng.randbytes(rng.randrange(1, 4))
            expected = parsed_count(bytes(raw), request_type, field)
            for enter in (None, shape):
                try:
                    counted = walk(bytes(raw), number, enter=enter)
                except WireError:
                    assert expected is None, bytes(raw)
                else:
                    assert expected is None or counted == expected, bytes(raw)
