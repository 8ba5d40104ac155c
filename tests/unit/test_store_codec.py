"""The record codec alone: round trips, and every single-byte flip is caught by framing or CRC."""

import random

import pytest

from quorumq.store import codec
from quorumq.store.codec import BLANK_BYTES_MIN, Frame, check_frame


def encode(commit_log_offset: int = 4096, properties: dict[str, str] | None = None,
           body: bytes = b"hello") -> bytes:
    topic, born_host, store_host = b"orders", b"10.0.0.9:40000", b"10.0.0.1:10911"
    encoded_properties = codec.encode_properties(properties if properties is not None else {"TAGS": "red"})
    size = codec.record_size(topic, born_host, store_host, encoded_properties, body)
    buffer = bytearray(size)
    codec.encode_record(memoryview(buffer), 0, size, topic, 3, 77, commit_log_offset, 1, 2, 1111, born_host,
                        2222, store_host, 4, encoded_properties, body)
    return bytes(buffer)


def test_record_round_trip():
    record = encode(properties={"TAGS": "red", "KEYS": "k1 k2", "UNIQ_KEY": "abc"}, body=bytes(range(256)))
    assert check_frame(record, 0, 1 << 20, 4096) == (Frame.MESSAGE, len(record))
    message = codec.decode_message(record, 0)
    assert (message.topic, message.queue_id, message.queue_offset) == ("orders", 3, 77)
    assert (message.commit_log_offset, message.flag, message.sys_flag) == (4096, 1, 2)
    assert (message.born_timestamp_ms, message.store_timestamp_ms, message.reconsume_times) == (1111, 2222, 4)
    assert (message.born_host, message.store_host) == ("10.0.0.9:40000", "10.0.0.1:10911")
    assert message.properties == {"TAGS": "red", "KEYS": "k1 k2", "UNIQ_KEY": "abc"}
    assert message.body == bytes(range(256)) and message.store_size == len(record)


def test_every_flipped_byte_is_detected():
    record = encode()
    segment = record + bytes(4096)  # the zeros after the last record of a segment
    for position in range(len(record)):
        damaged = bytearray(segment)
        damaged[position] ^= 0x5A
        frame, _ = check_frame(bytes(damaged), 0, len(segment), 4096)
        assert frame in (Frame.BAD_CRC, Frame.BAD_FRAMING), position


def test_random_bit_flips_are_detected():
    generator = random.Random(7)
    record = encode(body=generator.randbytes(1000))
    for _ in range(500):
        damaged = bytearray(record)
        damaged[generator.randrange(len(record))] ^= 1 << generator.randrange(8)
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


def test_tag_hash_is_deterministic_and_zero_only_without_tag():
    assert codec.tag_hash(None) == codec.tag_hash("") == 0
    assert codec.tag_hash("red") == codec.tag_hash(b"red") != 0
    assert codec.tag_hash("red") != codec.tag_hash("blue")
