"""Records a producer encodes itself (MessageStore.append_encoded, the SendBatch path): the store
patches only the fields it assigns, writes the same bytes as the v5 path for the same messages, and
refuses a whole batch when any record is damaged or breaks a rule."""

import pytest
from rocketmq.grpc_protocol import definition_pb2 as v5
from test_store_support import SEGMENT_BYTES, ManualClock, open_store, queue_files, segment_files

from quorumq import limits
from quorumq.client.producer import Message, RecordEncoder, _encoded_properties
from quorumq.core import codec, properties
from quorumq.core.message_types import RecordRules, fifo_queue
from quorumq.core.message_types import TopicMessageType as T
from quorumq.errors import Error, QuorumqError
from quorumq.protocol import messages as v5_messages
from quorumq.store import GetStatus

BORN_MS = 1_600_000_000_000
BORN_HOST = "10.0.0.9"
MAX_BODY = 4096


def any_record(encoded: bytearray, start: int, end: int) -> None:
    """No message rules: a record of any type and group is taken (these tests are about storage)."""


def sample(index: int, body_bytes: int = 300) -> tuple[Message, str]:
    """A message with every kind of property, and its id."""
    body = (f"m{index}:".encode() * body_bytes)[:body_bytes]
    tag = ("red", "blue", None)[index % 3]
    return Message(body, tag=tag, keys=(f"k{index}", "all") if index % 2 else (),
                   properties={"index": str(index), "é": "ü"} if index % 4 else {}), f"ID{index:030d}"


def encoded(topic: str, queue_id: int, batch: list[tuple[Message, str]]) -> bytes:
    """The batch as quorumq's producer puts it on the wire."""
    accepted = [(index, _encoded_properties(message, message_id), message.body)
                for index, (message, message_id) in enumerate(batch)]
    return RecordEncoder().encode(topic.encode(), queue_id, BORN_MS, BORN_HOST.encode(), accepted)


def through_v5(topic: str, queue_id: int, batch: list[tuple[Message, str]]):
    """The same messages as the official client sends them, checked by the v5 endpoint."""
    result = []
    for message, message_id in batch:
        system = v5.SystemProperties(message_id=message_id, message_type=v5.MessageType.NORMAL,
                                     born_host=BORN_HOST, queue_id=queue_id, keys=list(message.keys))
        if message.tag:
            system.tag = message.tag
        system.born_timestamp.FromMilliseconds(BORN_MS)
        result.append(v5_messages.incoming(v5.Message(topic=v5.Resource(name=topic), body=message.body,
                                                      user_properties=message.properties,
                                                      system_properties=system), MAX_BODY, explicit_queue=True))
    return result


def test_encoded_batches_are_stored_byte_for_byte_like_v5_sends(tmp_path):
    clock = ManualClock()
    by_v5 = open_store(tmp_path / "v5", clock, consume_queue_entries_per_file=16)
    by_records = open_store(tmp_path / "records", clock, consume_queue_entries_per_file=16)
    index = 0
    for round_ in range(30):  # enough to roll several 64 KiB segments, inside and between batches
        clock.now += 1
        batch = [sample(index + i, body_bytes=200 + 97 * ((index + i) % 23)) for i in range(7)]
        topic, queue_id = ("A", "B")[round_ % 2], round_ % 3
        expected = by_v5.append(through_v5(topic, queue_id, batch))
        got = by_records.append_encoded(topic, queue_id, encoded(topic, queue_id, batch), len(batch), MAX_BODY,
                                        any_record)
        assert got == expected
        index += len(batch)
    by_v5.flush()
    by_records.flush()
    assert len(segment_files(by_records.root)) > 3
    assert [path.read_bytes() for path in segment_files(by_records.root)] == \
        [path.read_bytes() for path in segment_files(by_v5.root)]
    assert queue_files(by_records.root) == queue_files(by_v5.root)
    read = by_records.get_messages("A", 0, 0, 100, 1 << 20)
    assert read.messages == by_v5.get_messages("A", 0, 0, 100, 1 << 20).messages
    first = read.messages[0]
    assert (first.born_timestamp_ms, first.born_host, first.store_host) == (BORN_MS, BORN_HOST, "10.0.0.1:10911")
    assert first.properties == {"UNIQ_KEY": "ID" + "0" * 30, "TAGS": "red"}
    assert read.messages[1].properties == {"UNIQ_KEY": "ID" + "0" * 29 + "1", "index": "1", "é": "ü",
                                           "TAGS": "blue", "KEYS": "k1 all"}
    by_v5.close()
    by_records.close()


def rejected(store, records: bytes, count: int = 3, topic: str = "T", queue_id: int = 0,
             max_body: int = MAX_BODY, rules=any_record) -> QuorumqError:
    end, queue_end = store.max_offset, store.queue_max_offset(topic, queue_id)
    with pytest.raises(QuorumqError) as raised:
        store.append_encoded(topic, queue_id, records, count, max_body, rules)
    assert store.max_offset == end and store.queue_max_offset(topic, queue_id) == queue_end, "nothing stored"
    return raised.value


def test_every_flipped_byte_rejects_the_batch_and_stores_nothing(tmp_path):
    store = open_store(tmp_path / "s")
    batch = [sample(i, body_bytes=40) for i in range(3)]
    good = encoded("T", 0, batch)
    starts, position = [], 0
    while position < len(good):
        starts.append(position)
        position += codec.BLANK_HEADER.unpack_from(good, position)[0]
    # The fields the store overwrites: whatever the producer leaves there does not matter.
    assigned = {start + codec.ASSIGNED_POSITION + i for start in starts for i in range(codec.ASSIGNED.size)}
    for position in [*range(starts[1]), *range(starts[1], len(good), 7)]:
        if position in assigned:
            continue
        damaged = bytearray(good)
        damaged[position] ^= 0x5A
        error = rejected(store, bytes(damaged))
        assert error.detail.startswith("record ") and error.detail.endswith("nothing was stored"), (position, error)
    for position in sorted(assigned):
        damaged = bytearray(good)
        damaged[position] ^= 0x5A
        store.append_encoded("T", 0, bytes(damaged), 3, MAX_BODY, any_record)
    stored = store.get_messages("T", 0, 0, 1000, 1 << 20).messages
    assert [m.queue_offset for m in stored] == list(range(3 * len(assigned)))
    store.close()


def test_records_must_name_the_request_topic_and_queue(tmp_path):
    store = open_store(tmp_path / "s")
    batch = [sample(i) for i in range(3)]
    mixed = encoded("T", 0, batch[:2]) + encoded("T", 1, batch[2:])
    error = rejected(store, mixed)
    assert error.error is Error.BAD_REQUEST and error.detail.startswith("record 2 of the batch")
    assert rejected(store, encoded("U", 0, batch), topic="T").error is Error.BAD_REQUEST
    assert rejected(store, encoded("T", 0, batch), queue_id=1).error is Error.BAD_REQUEST
    assert store.append_encoded("T", 0, encoded("T", 0, batch), 3, MAX_BODY, any_record).offsets[0][1] == 0
    store.close()


def test_limits_and_structure(tmp_path):
    store = open_store(tmp_path / "s")
    batch = [sample(i, body_bytes=100) for i in range(3)]
    records = encoded("T", 0, batch)
    too_large = rejected(store, records, max_body=99)
    assert too_large.error is Error.MESSAGE_BODY_TOO_LARGE and "record 0" in too_large.detail
    assert rejected(store, encoded("T", 0, [sample(0, body_bytes=SEGMENT_BYTES)]), count=1,
                    max_body=SEGMENT_BYTES).error is Error.MESSAGE_BODY_TOO_LARGE
    one_zero_byte = encoded("T", 0, [(Message(b"\0"), "ID")])
    hollow = raw_record(b"T", 0, b"UNIQ_KEY\x01ID\x02", b"")
    assert rejected(store, hollow, count=1).error is Error.MESSAGE_BODY_EMPTY
    assert rejected(store, records, count=2).error is Error.RECORD_CORRUPTED  # bytes left over
    assert rejected(store, records, count=4).error is Error.RECORD_CORRUPTED  # one missing
    assert rejected(store, records[:-1]).error is Error.RECORD_CORRUPTED  # torn
    assert rejected(store, bytes(range(256)) * 40).error is Error.RECORD_CORRUPTED  # garbage
    assert rejected(store, b"", count=1).error is Error.RECORD_CORRUPTED
    assert rejected(store, records, count=0).error is Error.BATCH_TOO_LARGE
    assert rejected(store, records, count=limits.BATCH_MESSAGES_MAX + 1).error is Error.BATCH_TOO_LARGE
    # Structure a v5 read relies on: properties are UTF-8 pairs, each ending with \x02.
    assert rejected(store, raw_record(b"T", 0, b"a\x01\xff\x02", b"x"), count=1).error is Error.RECORD_CORRUPTED
    assert rejected(store, raw_record(b"T", 0, b"TAGS\x01red", b"x"), count=1).error is Error.RECORD_CORRUPTED
    assert rejected(store, raw_record(b"T", 0, b"\x80a\x01b\x02", b"x", born_host=b"h\xc3"),
                    count=1).error is Error.RECORD_CORRUPTED
    # Only new NORMAL messages: the system flag marks other kinds, which the v5 path refuses too.
    assert rejected(store, raw_record(b"T", 0, b"", b"x", sys_flag=4), count=1).error is Error.MESSAGE_TYPE_UNSUPPORTED
    assert rejected(store, raw_record(b"T", 0, b"", b"x", reconsume_times=1), count=1).error is Error.BAD_REQUEST
    assert store.append_encoded("T", 0, one_zero_byte + records, 4, MAX_BODY, any_record).offsets[3][1] == 3
    assert store.get_messages("T", 0, 0, 10, 1 << 20).status is GetStatus.FOUND
    store.close()


def test_a_record_whose_type_or_group_its_topic_does_not_take_rejects_the_batch(tmp_path):
    store = open_store(tmp_path / "s")
    group = next(name for name in (f"g{number}" for number in range(100))
                 if fifo_queue(name, 4) == 1 != fifo_queue(name, 3))
    plain, grouped = sample(0)[0], Message(b"fifo", message_group=group)
    batch = [(plain, "ID0"), (grouped, "ID1")]
    records = encoded("T", 1, batch)

    def rules(topic_type):
        return RecordRules("T", topic_type, 1, 4).check

    for topic_type, index in ((T.NORMAL, 1), (T.FIFO, 0)):
        error = rejected(store, records, count=2, queue_id=1, rules=rules(topic_type))
        assert error.error is Error.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, error
        assert error.detail.startswith(f"record {index} of the batch: topic T takes {topic_type.value} messages")
    assert store.append_encoded("T", 1, records, 2, MAX_BODY, rules(T.MIXED)).offsets[1][1] == 1
    elsewhere = RecordRules("T", T.FIFO, 1, 3).check  # the group's queue among 3 is not 1
    assert rejected(store, encoded("T", 1, [(grouped, "ID")]), count=1, queue_id=1,
                    rules=elsewhere).error is Error.BAD_REQUEST
    bad_group = raw_record(b"T", 1, f"{properties.MESSAGE_GROUP}\x01a\nb\x02".encode(), b"x")
    assert rejected(store, bad_group, count=1, queue_id=1, rules=rules(T.FIFO)).error is Error.ILLEGAL_MESSAGE_GROUP
    # A type's property name in a body or inside a value makes no type.
    in_body = encoded("T", 1, [(Message(f"{properties.MESSAGE_GROUP}\x01g\x02".encode()), "ID")])
    in_value = raw_record(b"T", 1, b"a\x01DELAY\x01x\x02", b"x")
    assert store.append_encoded("T", 1, in_body + in_value, 2, MAX_BODY, rules(T.NORMAL)).offsets[1][1] == 3
    store.close()


def raw_record(topic: bytes, queue_id: int, properties: bytes, body: bytes, born_host: bytes = b"h",
               sys_flag: int = 0, reconsume_times: int = 0) -> bytes:
    size = codec.record_size(topic, born_host, properties, body)
    buffer = bytearray(size)
    codec.encode_record(memoryview(buffer), 0, size, topic, queue_id, 0, sys_flag, 1, born_host, reconsume_times,
                        properties, body)
    return bytes(buffer)
