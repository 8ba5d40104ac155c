"""The commit-log record format: pure encoding and checking, no I/O.

A message record is a fixed big-endian header followed by five variable parts:

    total_size i32 | magic u32 | crc u32 | queue_id i32 | queue_offset i64 | commit_log_offset i64 |
    flag i32 | sys_flag i32 | born_timestamp_ms i64 | store_timestamp_ms i64 | reconsume_times i32 |
    topic_length u8 | born_host_length u8 | store_host_length u8 | properties_length u16 |
    body_length i32 | topic | born_host | store_host | properties | body

The CRC (zlib.crc32) covers every byte after the CRC field, so offsets and timestamps are protected
as well as the body. A record never spans segments: the unused end of a segment holds one BLANK
record, `total_size i32 | magic u32`, whose size must reach the segment end exactly; the bytes
after its header are zero. Properties use RocketMQ's form, name \\x01 value \\x02 per pair.
"""

import struct
import zlib
from dataclasses import dataclass
from enum import IntEnum
from typing import Mapping

from quorumq import limits

HEADER = struct.Struct(">iIIiqqiiqqiBBBHi")
BLANK_HEADER = struct.Struct(">iI")  # also the first two fields of a message record
CRC = struct.Struct(">I")
CRC_POSITION = 8
CHECKED_FROM = 12  # the CRC covers the record from here to its end
BLANK_BYTES_MIN = BLANK_HEADER.size

MESSAGE_MAGIC = 0x51514D31  # "QQM1"
BLANK_MAGIC = 0x51514231  # "QQB1"

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"
TAGS_PROPERTY = "TAGS"
_TAGS_KEY = b"TAGS\x01"

# Positions of fields in a HEADER tuple.
_MAGIC_FIELD, _CRC_FIELD, _COMMIT_LOG_OFFSET_FIELD, _STORE_TIMESTAMP_FIELD, _LENGTHS_FROM = 1, 2, 5, 9, 11

assert HEADER.size + limits.NAME_LENGTH_MAX + 2 * limits.HOST_LENGTH_MAX + BLANK_BYTES_MIN \
    <= limits.RECORD_HEADER_BYTES_MAX
assert limits.PROPERTIES_BYTES_MAX < 1 << 16


class Frame(IntEnum):
    """What `check_frame` found at a position of the commit log."""

    MESSAGE = 0  # a whole message record with a good CRC
    BLANK = 1  # the padding record that ends a segment
    EMPTY = 2  # zeros: no record was ever written here
    SHORT = 3  # the bytes available end inside the record
    BAD_FRAMING = 4  # magic, sizes or the stored offset do not fit
    BAD_CRC = 5  # framing holds but the checksum does not


@dataclass(slots=True)
class StoredMessage:
    topic: str
    queue_id: int
    queue_offset: int
    commit_log_offset: int
    store_size: int
    flag: int
    sys_flag: int
    born_timestamp_ms: int
    born_host: str
    store_timestamp_ms: int
    store_host: str
    reconsume_times: int
    properties: dict[str, str]
    body: bytes


def tag_hash(tag: str | bytes | None) -> int:
    """The consume-queue tag code: crc32 of the tag's UTF-8 bytes, 0 only when there is no tag."""
    if not tag:
        return 0
    data = tag.encode() if isinstance(tag, str) else tag
    return zlib.crc32(data) or 1  # 0 is reserved for "no tag"


def encode_properties(properties: Mapping[str, str]) -> bytes:
    if not properties:
        return b""
    text = "".join([f"{name}\x01{value}\x02" for name, value in properties.items()])
    # A separator inside a name or value would split the pair differently when read back.
    pairs = len(properties)
    if text.count(NAME_VALUE_SEPARATOR) != pairs or text.count(PROPERTY_SEPARATOR) != pairs:
        raise ValueError("a property name or value contains \\x01 or \\x02")
    return text.encode()


def decode_properties(data: bytes | memoryview) -> dict[str, str]:
    if not data:
        return {}
    result = {}
    for pair in str(data, "utf-8").split(PROPERTY_SEPARATOR)[:-1]:
        name, _, value = pair.partition(NAME_VALUE_SEPARATOR)
        result[name] = value
    return result


def tags_of(properties: bytes) -> bytes | None:
    """The raw TAGS value of encoded properties, found without decoding them all."""
    if properties.startswith(_TAGS_KEY):
        start = len(_TAGS_KEY)
    else:
        found = properties.find(b"\x02" + _TAGS_KEY)
        if found < 0:
            return None
        start = found + 1 + len(_TAGS_KEY)
    return properties[start:properties.index(b"\x02", start)]


def record_size(topic: bytes, born_host: bytes, store_host: bytes, properties: bytes, body: bytes) -> int:
    return HEADER.size + len(topic) + len(born_host) + len(store_host) + len(properties) + len(body)


def encode_record(view: memoryview, position: int, size: int, topic: bytes, queue_id: int,
                  queue_offset: int, commit_log_offset: int, flag: int, sys_flag: int,
                  born_timestamp_ms: int, born_host: bytes, store_timestamp_ms: int,
                  store_host: bytes, reconsume_times: int, properties: bytes, body: bytes) -> None:
    """Write one record of `size` bytes (from `record_size`) at `view[position:]`, CRC last."""
    HEADER.pack_into(view, position, size, MESSAGE_MAGIC, 0, queue_id, queue_offset, commit_log_offset,
                     flag, sys_flag, born_timestamp_ms, store_timestamp_ms, reconsume_times, len(topic),
                     len(born_host), len(store_host), len(properties), len(body))
    start = position + HEADER.size
    end = start + len(topic)
    view[start:end] = topic
    start, end = end, end + len(born_host)
    view[start:end] = born_host
    start, end = end, end + len(store_host)
    view[start:end] = store_host
    start, end = end, end + len(properties)
    view[start:end] = properties
    start, end = end, end + len(body)
    view[start:end] = body
    CRC.pack_into(view, position + CRC_POSITION, zlib.crc32(view[position + CHECKED_FROM:end]))


def encode_blank(view: memoryview, position: int, size: int) -> None:
    BLANK_HEADER.pack_into(view, position, size, BLANK_MAGIC)


def check_frame(view: memoryview | bytes | bytearray, position: int, segment_remaining: int,
                commit_log_offset: int) -> tuple[Frame, int]:
    """Check the record at `view[position:]`, which sits at `commit_log_offset` in the log.

    `segment_remaining` is the number of bytes from the record to the end of its segment; the
    view may hold fewer (SHORT asks for a longer read). Returns the finding and the record size.
    """
    available = len(view) - position
    if available < BLANK_BYTES_MIN:
        return (Frame.EMPTY if not any(view[position:]) else Frame.SHORT), 0
    total, magic = BLANK_HEADER.unpack_from(view, position)
    if magic == BLANK_MAGIC:
        return (Frame.BLANK if total == segment_remaining else Frame.BAD_FRAMING), total
    if magic != MESSAGE_MAGIC:
        return (Frame.EMPTY if total == 0 and magic == 0 else Frame.BAD_FRAMING), 0
    if not HEADER.size <= total <= segment_remaining:
        return Frame.BAD_FRAMING, 0
    if available < total:
        return Frame.SHORT, total
    header = HEADER.unpack_from(view, position)
    if HEADER.size + sum(header[_LENGTHS_FROM:]) != total \
            or header[_COMMIT_LOG_OFFSET_FIELD] != commit_log_offset:
        return Frame.BAD_FRAMING, 0
    if zlib.crc32(view[position + CHECKED_FROM:position + total]) != header[_CRC_FIELD]:
        return Frame.BAD_CRC, total
    return Frame.MESSAGE, total


def check_detached(view: memoryview | bytes, position: int) -> tuple[Frame, int]:
    """check_frame for a record read out of the log (e.g. sent over the wire): it is checked
    against the commit-log offset it carries, and `view` ends where the records end."""
    if len(view) - position < HEADER.size:
        return Frame.SHORT, 0
    carried_offset = HEADER.unpack_from(view, position)[_COMMIT_LOG_OFFSET_FIELD]
    return check_frame(view, position, len(view) - position, carried_offset)


@dataclass(slots=True)
class RecordFields:
    """The fields dispatch needs from a checked record, read without decoding the body."""

    topic: str
    queue_id: int
    queue_offset: int
    tag_hash: int


def dispatch_fields(view: memoryview | bytes, position: int) -> RecordFields:
    (_, _, _, queue_id, queue_offset, _, _, _, _, _, _, topic_length, born_host_length,
     store_host_length, properties_length, _) = HEADER.unpack_from(view, position)
    topic_start = position + HEADER.size
    topic_end = topic_start + topic_length
    properties_start = topic_end + born_host_length + store_host_length
    properties = bytes(view[properties_start:properties_start + properties_length])
    return RecordFields(str(view[topic_start:topic_end], "utf-8"), queue_id, queue_offset,
                        tag_hash(tags_of(properties)))


def decode_message(view: memoryview | bytes, position: int) -> StoredMessage:
    """Decode a record that `check_frame` accepted."""
    (total, _, _, queue_id, queue_offset, commit_log_offset, flag, sys_flag, born_timestamp_ms,
     store_timestamp_ms, reconsume_times, topic_length, born_host_length, store_host_length,
     properties_length, body_length) = HEADER.unpack_from(view, position)
    topic_start = position + HEADER.size
    born_host_start = topic_start + topic_length
    store_host_start = born_host_start + born_host_length
    properties_start = store_host_start + store_host_length
    body_start = properties_start + properties_length
    return StoredMessage(
        str(view[topic_start:born_host_start], "utf-8"), queue_id, queue_offset, commit_log_offset, total,
        flag, sys_flag, born_timestamp_ms, str(view[born_host_start:store_host_start], "utf-8"),
        store_timestamp_ms, str(view[store_host_start:properties_start], "utf-8"), reconsume_times,
        decode_properties(view[properties_start:body_start]),
        bytes(view[body_start:body_start + body_length]))


def store_timestamp_of(header_bytes: bytes) -> int | None:
    """The store timestamp of a record from its first HEADER.size bytes, None if not a message."""
    if len(header_bytes) < HEADER.size:
        return None
    header = HEADER.unpack_from(header_bytes, 0)
    return header[_STORE_TIMESTAMP_FIELD] if header[_MAGIC_FIELD] == MESSAGE_MAGIC else None
