"""The commit-log record format: pure encoding and checking, no I/O.

A message record is a fixed big-endian header followed by four variable parts:

    total_size i32 | magic u32 |
    queue_offset i64 | commit_log_offset i64 | store_timestamp_ms i64 |      assigned by the broker
    crc u32 |
    queue_id i32 | flag i32 | sys_flag i32 | born_timestamp_ms i64 |        given by the producer,
    reconsume_times i32 | topic_length u8 | born_host_length u8 |           covered by the CRC
    properties_length u16 | body_length u32 | topic | born_host | properties | body

A producer can encode a whole record (zeros in the assigned fields) and the broker only patches the
three assigned fields in place: they sit before the CRC-checked region, so the CRC the producer
computed is the CRC the record keeps, from the client to the disk to the consumer. `check_frame`
still catches damage to every byte but two fields: a wrong size, magic or length breaks the
framing, a wrong commit-log offset no longer matches the record's position, and the CRC covers
the rest. A damaged queue offset or store timestamp passes the frame check. The store catches a
damaged queue offset where it matters (a read compares it with the consume-queue entry that led
there, recovery with the queue's previous offset); a damaged store timestamp goes unnoticed, and
only misleads a search by time and retention's age of a segment, never what a message holds.

The storing broker's address is not in the record: whoever reads knows it (the store its own
`store_host`, a client the broker it pulled from) and fills `StoredMessage.store_host`.

A record never spans segments: the unused end of a segment holds one BLANK record,
`total_size i32 | magic u32`, whose size must reach the segment end exactly; the bytes after its
header are zero. Properties use RocketMQ's form, name \\x01 value \\x02 per pair.

A topic deletion is a message record too, quorumq's own (RocketMQ deletes a topic's queues beside
its log): `sys_flag` TOPIC_DELETION, the deleted topic's name, queue id and queue offset 0, no
properties and no body. It enters no consume queue; every store that dispatches it (a
master's append, a slave's copy, recovery) drops the topic's queues there, so the replicas of one
log hold the same queues, and a topic made again starts at queue offset 0 on each of them.
"""

import struct
import zlib
from dataclasses import dataclass
from enum import IntEnum
from typing import Mapping

from quorumq import limits

HEADER = struct.Struct(">iIqqqIiiiqiBBHI")
BLANK_HEADER = struct.Struct(">iI")  # also the first two fields of a message record
ASSIGNED = struct.Struct(">qqq")  # queue offset, commit-log offset, store timestamp
ASSIGNED_POSITION = BLANK_HEADER.size
CRC = struct.Struct(">I")
CRC_POSITION = ASSIGNED_POSITION + ASSIGNED.size
CHECKED_FROM = CRC_POSITION + CRC.size  # the CRC covers the record from here to its end
BLANK_BYTES_MIN = BLANK_HEADER.size

MESSAGE_MAGIC = 0x51514D32  # "QQM2": the layout above ("QQM1" had the CRC over the assigned fields)
BLANK_MAGIC = 0x51514231  # "QQB1"
TOPIC_DELETION = 1 << 30  # the sys_flag of a deletion record: above every RocketMQ flag, refused from clients

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"
TAGS_PROPERTY = "TAGS"
_TAGS_KEY = b"TAGS\x01"
_TAGS_PAIR = b"\x02" + _TAGS_KEY

# Positions of fields in a HEADER tuple.
(_TOTAL_FIELD, _MAGIC_FIELD, _QUEUE_OFFSET_FIELD, _COMMIT_LOG_OFFSET_FIELD, _STORE_TIMESTAMP_FIELD, _CRC_FIELD,
 QUEUE_ID_FIELD, _FLAG_FIELD, SYS_FLAG_FIELD, _BORN_TIMESTAMP_FIELD, RECONSUME_TIMES_FIELD,
 TOPIC_LENGTH_FIELD, BORN_HOST_LENGTH_FIELD, PROPERTIES_LENGTH_FIELD, BODY_LENGTH_FIELD) = range(15)
_LENGTHS_FROM = TOPIC_LENGTH_FIELD  # the lengths of the variable parts, all unsigned, to the end

assert struct.calcsize(HEADER.format[:6]) == CRC_POSITION  # the assigned fields, then the CRC
assert HEADER.size + limits.NAME_LENGTH_MAX + limits.HOST_LENGTH_MAX + BLANK_BYTES_MIN \
    <= limits.RECORD_HEADER_BYTES_MAX
assert limits.PROPERTIES_BYTES_MAX < 1 << 16 and limits.HOST_LENGTH_MAX < 1 << 8
assert limits.NAME_LENGTH_MAX < 1 << 8


class Frame(IntEnum):
    """What `check_frame` found at a position of the commit log."""

    MESSAGE = 0  # a whole message record with a good CRC
    BLANK = 1  # the padding record that ends a segment
    EMPTY = 2  # zeros: no record was ever written here
    SHORT = 3  # the bytes available end inside the record
    BAD_FRAMING = 4  # magic, sizes or the stored offset do not fit
    BAD_CRC = 5  # framing holds but the checksum does not


@dataclass(slots=True, kw_only=True)
class MessageIn:
    """A message as a send gives it to the store, before the store assigns its offsets: what a
    broker's v5 endpoint and a proxy make of a client's message (protocol/messages.py)."""

    topic: str
    queue_id: int
    body: bytes
    properties: Mapping[str, str]
    flag: int = 0
    sys_flag: int = 0
    born_timestamp_ms: int
    born_host: str
    reconsume_times: int = 0


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
    store_host: str  # not in the record: the reader's knowledge of the broker that stored it
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


def decode_properties(data: bytes | bytearray | memoryview) -> dict[str, str]:
    if not data:
        return {}
    result = {}
    for pair in str(data, "utf-8").split(PROPERTY_SEPARATOR)[:-1]:
        name, _, value = pair.partition(NAME_VALUE_SEPARATOR)
        result[name] = value
    return result


def tags_of(properties: bytes | bytearray, start: int = 0, end: int | None = None) -> bytes | None:
    """The raw TAGS value of the encoded properties in `properties[start:end]`, found without
    decoding them all (and without copying them out of a larger buffer)."""
    return _property(properties, _TAGS_KEY, _TAGS_PAIR, start, end)


def _property(properties: bytes | bytearray, key: bytes, pair: bytes, start: int, end: int | None) -> bytes | None:
    """The raw value of `key` (name \\x01) in the encoded properties in `properties[start:end]`;
    `pair` is \\x02 + key."""
    if end is None:
        end = len(properties)
    if properties.startswith(key, start, end):
        value_start = start + len(key)
    else:
        found = properties.find(pair, start, end)
        if found < 0:
            return None
        value_start = found + len(pair)
    return bytes(properties[value_start:properties.index(b"\x02", value_start, end)])


def record_size(topic: bytes, born_host: bytes, properties: bytes, body: bytes) -> int:
    return HEADER.size + len(topic) + len(born_host) + len(properties) + len(body)


def encode_record(view: memoryview, position: int, size: int, topic: bytes, queue_id: int, flag: int,
                  sys_flag: int, born_timestamp_ms: int, born_host: bytes, reconsume_times: int,
                  properties: bytes, body: bytes | memoryview, queue_offset: int = 0, commit_log_offset: int = 0,
                  store_timestamp_ms: int = 0) -> None:
    """Write one record of `size` bytes (from `record_size`) at `view[position:]`, CRC last.

    A producer leaves the assigned fields at 0 for the broker to patch (`ASSIGNED`); the store
    passes them, which gives the same bytes as encoding with zeros and patching.
    """
    HEADER.pack_into(view, position, size, MESSAGE_MAGIC, queue_offset, commit_log_offset, store_timestamp_ms, 0,
                     queue_id, flag, sys_flag, born_timestamp_ms, reconsume_times, len(topic), len(born_host),
                     len(properties), len(body))
    start = position + HEADER.size
    end = start + len(topic)
    view[start:end] = topic
    start, end = end, end + len(born_host)
    view[start:end] = born_host
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
    frame, _ = check_message(view, position, total, commit_log_offset)
    return frame, (0 if frame is Frame.BAD_FRAMING else total)


def whole_records_end(view: memoryview | bytes | bytearray, position: int) -> int:
    """Where the run of whole records (messages and BLANKs) from `position` ends in `view`, by
    their size fields alone: no CRC or field checks. For copying bytes the store wrote and
    checked itself to a reader that checks every record again (a slave's append_raw)."""
    end = len(view)
    while end - position >= BLANK_BYTES_MIN:
        total, magic = BLANK_HEADER.unpack_from(view, position)
        if magic not in (MESSAGE_MAGIC, BLANK_MAGIC) or total < BLANK_BYTES_MIN or position + total > end:
            break
        position += total
    return position


def check_message(view: memoryview | bytes | bytearray, position: int, total: int,
                  commit_log_offset: int) -> tuple[Frame, tuple]:
    """The checks of a message record whose magic and `total` size were found to fit: the lengths
    add up to the size, the record sits at its own commit-log offset, the CRC holds. Returns the
    finding and the unpacked HEADER, for callers that go on to read its fields."""
    header = HEADER.unpack_from(view, position)
    if HEADER.size + sum(header[_LENGTHS_FROM:]) != total or header[_COMMIT_LOG_OFFSET_FIELD] != commit_log_offset:
        return Frame.BAD_FRAMING, header
    if zlib.crc32(view[position + CHECKED_FROM:position + total]) != header[_CRC_FIELD]:
        return Frame.BAD_CRC, header
    return Frame.MESSAGE, header


def check_detached(view: memoryview | bytes, position: int) -> tuple[Frame, int]:
    """check_frame for a record read out of the log (e.g. sent over the wire): it is checked
    against the commit-log offset it carries, and `view` ends where the records end."""
    if len(view) - position < HEADER.size:
        return Frame.SHORT, 0
    carried_offset = HEADER.unpack_from(view, position)[_COMMIT_LOG_OFFSET_FIELD]
    return check_frame(view, position, len(view) - position, carried_offset)


def queue_offset_of(view: memoryview | bytes, position: int) -> int:
    """The queue offset of the message record at `position`."""
    return ASSIGNED.unpack_from(view, position + ASSIGNED_POSITION)[0]


@dataclass(slots=True)
class RecordFields:
    """The fields dispatch needs from a checked record, read without decoding the body."""

    topic: str
    queue_id: int
    queue_offset: int
    tag_hash: int
    deletes_topic: bool  # a deletion record: it drops the topic's queues and enters none


def dispatch_fields(view: memoryview | bytes, position: int) -> RecordFields:
    header = HEADER.unpack_from(view, position)
    topic_start = position + HEADER.size
    topic_end = topic_start + header[TOPIC_LENGTH_FIELD]
    properties_start = topic_end + header[BORN_HOST_LENGTH_FIELD]
    properties_end = properties_start + header[PROPERTIES_LENGTH_FIELD]
    if isinstance(view, bytes):  # searched in place
        tags = tags_of(view, properties_start, properties_end)
    else:
        tags = tags_of(bytes(view[properties_start:properties_end]))
    return RecordFields(str(view[topic_start:topic_end], "utf-8"), header[QUEUE_ID_FIELD],
                        header[_QUEUE_OFFSET_FIELD], tag_hash(tags), header[SYS_FLAG_FIELD] == TOPIC_DELETION)


def message_property(data: bytes, position: int, name: str) -> str:
    """One property of the message record at `data[position:]` ("" when it has none), found
    without decoding the rest."""
    header = HEADER.unpack_from(data, position)
    start = position + HEADER.size + header[TOPIC_LENGTH_FIELD] + header[BORN_HOST_LENGTH_FIELD]
    key = name.encode() + b"\x01"
    value = _property(data, key, b"\x02" + key, start, start + header[PROPERTIES_LENGTH_FIELD])
    return "" if value is None else str(value, "utf-8")


def records_properties(view: memoryview | bytes, count: int) -> list[dict[str, str]]:
    """The decoded properties of `count` back-to-back records, read by their size fields alone,
    before any check (ValueError when they do not parse)."""
    found: list[dict[str, str]] = []
    position = 0
    for _ in range(count):
        if len(view) - position < HEADER.size:
            raise ValueError(f"the records end {len(view) - position} bytes into record {len(found)}")
        header = HEADER.unpack_from(view, position)
        start = position + HEADER.size + header[TOPIC_LENGTH_FIELD] + header[BORN_HOST_LENGTH_FIELD]
        end = start + header[PROPERTIES_LENGTH_FIELD]
        if not HEADER.size <= header[0] <= len(view) - position or end > position + header[0]:
            raise ValueError(f"record {len(found)} does not fit its size")
        found.append(decode_properties(view[start:end]))  # bad UTF-8 raises UnicodeDecodeError, a ValueError
        position += header[0]
    return found


def last_record_position(view: memoryview | bytes) -> int | None:
    """Where the last of back-to-back records starts, by their size fields alone (no checks);
    None when the sizes do not add up to the view's length."""
    position = 0
    while len(view) - position >= HEADER.size:
        size = BLANK_HEADER.unpack_from(view, position)[0]
        if size < HEADER.size or position + size > len(view):
            return None
        if position + size == len(view):
            return position
        position += size
    return None


def decode_message(view: memoryview | bytes, position: int, store_host: str) -> StoredMessage:
    """Decode a record that `check_frame` accepted; `store_host` is the broker that stored it."""
    (total, _, queue_offset, commit_log_offset, store_timestamp_ms, _, queue_id, flag, sys_flag,
     born_timestamp_ms, reconsume_times, topic_length, born_host_length, properties_length,
     body_length) = HEADER.unpack_from(view, position)
    topic_start = position + HEADER.size
    born_host_start = topic_start + topic_length
    properties_start = born_host_start + born_host_length
    body_start = properties_start + properties_length
    return StoredMessage(
        str(view[topic_start:born_host_start], "utf-8"), queue_id, queue_offset, commit_log_offset, total,
        flag, sys_flag, born_timestamp_ms, str(view[born_host_start:properties_start], "utf-8"),
        store_timestamp_ms, store_host, reconsume_times, decode_properties(view[properties_start:body_start]),
        bytes(view[body_start:body_start + body_length]))


def store_timestamp_of(header_bytes: bytes) -> int | None:
    """The store timestamp of a record from its first HEADER.size bytes, None if not a message."""
    if len(header_bytes) < HEADER.size:
        return None
    header = HEADER.unpack_from(header_bytes, 0)
    return header[_STORE_TIMESTAMP_FIELD] if header[_MAGIC_FIELD] == MESSAGE_MAGIC else None


def set_properties(properties: bytes, updates: Mapping[str, str]) -> bytes:
    """Encoded properties with each property of `updates` set: any pair of that name removed, the
    new pairs appended. ValueError when a name or value holds a separator or the result passes
    PROPERTIES_BYTES_MAX."""
    for name in updates:
        key = name.encode() + b"\x01"
        pair = b"\x02" + key
        while True:
            if properties.startswith(key):
                start = 0
            else:
                found = properties.find(pair)
                if found < 0:
                    break
                start = found + 1
            properties = properties[:start] + properties[properties.index(b"\x02", start) + 1:]
    result = properties + encode_properties(updates)
    if len(result) > limits.PROPERTIES_BYTES_MAX:
        raise ValueError(f"the properties would take {len(result)} bytes, more than {limits.PROPERTIES_BYTES_MAX}")
    return result


def with_properties(record: bytes, queue_id: int, updates: Mapping[str, str]) -> bytes:
    """A copy of the message record `record` (alone in the bytes) for a producer to send to
    `queue_id`: its properties with `updates` set (set_properties), the assigned fields at 0 and a
    new CRC; every other field and the body are the record's own. ValueError when the record's
    lengths do not add up to its bytes, or from set_properties."""
    header = HEADER.unpack_from(record, 0)
    topic_length, born_host_length, properties_length, body_length = header[_LENGTHS_FROM:]
    if header[_MAGIC_FIELD] != MESSAGE_MAGIC or header[_TOTAL_FIELD] != len(record) \
            or HEADER.size + topic_length + born_host_length + properties_length + body_length != len(record):
        raise ValueError("not one whole message record")
    born_host_start = HEADER.size + topic_length
    properties_start = born_host_start + born_host_length
    body_start = properties_start + properties_length
    properties = set_properties(record[properties_start:body_start], updates)
    view = memoryview(record)
    size = len(record) - properties_length + len(properties)
    copy = bytearray(size)
    encode_record(memoryview(copy), 0, size, record[HEADER.size:born_host_start], queue_id, header[_FLAG_FIELD],
                  header[SYS_FLAG_FIELD], header[_BORN_TIMESTAMP_FIELD], record[born_host_start:properties_start],
                  header[RECONSUME_TIMES_FIELD], properties, view[body_start:])
    return bytes(copy)
