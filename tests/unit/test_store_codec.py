"""The record codec alone: round trips, and every single-byte flip outside the broker-assigned queue
offset and store timestamp is caught by framing or CRC."""

import random

import pytest

from quorumq.core import codec
from quorumq.core.codec import BLANK_BYTES_MIN, Frame, check_frame


def encode(commit_log_offset: int = 4096, properties: dict[str, str] | None = None,
           body: bytes = b"hello") -> bytes:
    topic, born_host = b"orders", b"10.0.0.9:40000"
    encoded_properties = codec.encode_properties(properties if properties is not None else {"TAGS": "red"})
    size = codec.record_size(topic, born_host, encoded_properties, body)
    buffer = bytearray(size)
    codec.encode_record(memoryview(buffer), 0, size, topic, 3, 1, 2, 1111, born_host, 4, encoded_properties, body,
                        queue_offset=77, commit_log_offset=commit_log_offset, store_timestamp_ms=2222)
    return bytes(buffer)


# The queue offset and store timestamp lie outside the CRC (the broker patches them into a
# producer's record); the store checks them otherwise (test_store_append, test_store_recovery).
UNCHECKED = set(range(codec.ASSIGNED_POSITION, codec.ASSIGNED_POSITION + 8)) \
    | set(range(codec.ASSIGNED_POSITION + 16, codec.ASSIGNED_POSITION + 24))


def test_record_round_trip():
    record = encode(properties={"TAGS": "red", "KEYS": "k1 k2", "UNIQ_KEY": "abc"}, body=bytes(range(256)))
    assert check_frame(record, 0, 1 << 20, 4096) == (Frame.MESSAGE, len(record))
    message = codec.decode_message(record, 0, "10.0.0.1:10911")
    assert (message.topic, message.queue_id, message.queue_offset) == ("orders", 3, 77)
    assert (message.commit_log_offset, message.flag, message.sys_flag) == (4096, 1, 2)
    assert (message.born_timestamp_ms, message.store_timestamp_ms, message.reconsume_times) == (1111, 2222, 4)
    assert (message.born_host, message.store_host) == ("10.0.0.9:40000", "10.0.0.1:10911")
    assert codec.queue_offset_of(record, 0) == 77
    assert message.properties == {"TAGS": "red", "KEYS": "k1 k2", "UNIQ_KEY": "abc"}
    assert message.body == bytes(range(256)) and message.store_size == len(record)


def test_every_flipped_byte_is_detected_but_queue_offset_and_store_timestamp():
    record = encode()
    segment = record + bytes(4096)  # the zeros after the last record of a segment
    for position in range(len(record)):
        damaged = bytearray(segment)
        damaged[position] ^= 0x5A
        frame, _ = check_frame(bytes(damaged), 0, len(segment), 4096)
        if position in UNCHECKED:
            assert frame is Frame.MESSAGE, position
        else:
            assert frame in (Frame.BAD_CRC, Frame.BAD_FRAMING), position


def test_assigned_fields_are_patched_without_touching_the_crc():
    # What a producer sends (zeros where the broker assigns) and what the store keeps differ only
    # in the three assigned fields.
    produced = bytearray(encode(commit_log_offset=0))
    codec.ASSIGNED.pack_into(produced, codec.ASSIGNED_POSITION, 0, 0, 0)
    assert check_frame(bytes(produced), 0, 1 << 20, 0)[0] is Frame.MESSAGE
    codec.ASSIGNED.pack_into(produced, codec.ASSIGNED_POSITION, 77, 4096, 2222)
    assert bytes(produced) == encode()


def test_random_bit_flips_are_detected():
    generator = random.Random(7)
    record = encode(body=generator.randbytes(1000))
    checked = [position for position in range(len(record)) if position not in UNCHECKED]
    for _ in range(500):
        damaged = bytearray(record)
        damaged[generator.choice(checked)] ^= 1 << generator.randrange(8)
        assert check_frame(bytes(damaged), 0, 1 << 20, 4096)[0] is not Frame.MESSAGE


def test_record_at_another_offset_is_bad_framing():
    # A record copied to the wrong place (a misdirected write) is not accepted there.
    assert check_frame(encode(commit_log_offset=4096), 0, 1 << 20, 8192)[0] is Frame.BAD_FRAMING


def test_short_empty_and_blank_frames():
    record = encode()
    assert check_frame(record[:40], 0, 1 << 20, 4096) == (Frame.SHORT, len(record))
    assert check_frame(record[:5], 0, 1 << 20, 4096)[0] is Frame.SHORT
    assert check_frame(bytes(100), 0, 1 << 20, 4096)[0] is Frame.EMPTY
    assert check_frame(b"", 0, 1 << 20, 4096)[0] is Frame.EMPTY
    # A record larger than what is left of its segment cannot be real.
    assert check_frame(record, 0, len(record) - 1, 4096)[0] is Frame.BAD_FRAMING
    blank = bytearray(BLANK_BYTES_MIN)
    codec.encode_blank(memoryview(blank), 0, 500)
    assert check_frame(bytes(blank), 0, 500, 0) == (Frame.BLANK, 500)
    assert check_frame(bytes(blank), 0, 501, 0)[0] is Frame.BAD_FRAMING


def test_properties_round_trip_and_separators_rejected():
    properties = {"a": "1", "TAGS": "x", "empty": "", "unicode": "é漢"}
    assert codec.decode_properties(codec.encode_properties(properties)) == properties
    assert codec.encode_properties({}) == b"" and codec.decode_properties(b"") == {}
    for bad in ({"a\x01": "1"}, {"a": "1\x02"}, {"a": "\x01"}):
        with pytest.raises(ValueError):
            codec.encode_properties(bad)


def test_tags_found_without_full_decode():
    assert codec.tags_of(codec.encode_properties({"TAGS": "red", "KEYS": "k"})) == b"red"
    assert codec.tags_of(codec.encode_properties({"KEYS": "k", "TAGS": "blue"})) == b"blue"
    assert codec.tags_of(codec.encode_properties({"XTAGS": "no", "KEYS": "TAGS"})) is None
    assert codec.tags_of(b"") is None
    # Within a larger buffer, without copying the properties out.
    inner = codec.encode_properties({"KEYS": "k", "TAGS": "in"})
    buffer = bytearray(b"xxTAGS\x01no\x02" + inner + b"TAGS\x01after\x02")
    start = len(b"xxTAGS\x01no\x02")
    assert codec.tags_of(buffer, start, start + len(inner)) == b"in"
    assert codec.tags_of(buffer, start, start + len(b"KEYS\x01k\x02")) is None


def test_tag_hash_is_deterministic_and_zero_only_without_tag():
    assert codec.tag_hash(None) == codec.tag_hash("") == 0
    assert codec.tag_hash("red") == codec.tag_hash(b"red") != 0
    assert codec.tag_hash("red") != codec.tag_hash("blue")
