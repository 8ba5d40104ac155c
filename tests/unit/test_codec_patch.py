"""The replicator's patch of a record: set_properties sets named properties in the encoded form,
with_properties copies a whole record for a producer with them, every other field and the body
kept, the CRC valid again."""

import itertools

import pytest

from quorumq import limits
from quorumq.core import codec
from quorumq.core.codec import Frame


def record(properties: dict[str, str], body: bytes = b"payload") -> bytes:
    topic, born_host = b"orders", b"10.0.0.9:40000"
    encoded = codec.encode_properties(properties)
    size = codec.record_size(topic, born_host, encoded, body)
    buffer = bytearray(size)
    codec.encode_record(memoryview(buffer), 0, size, topic, 3, 1, 2, 1111, born_host, 4, encoded, body,
                        queue_offset=77, commit_log_offset=4096, store_timestamp_ms=2222)
    return bytes(buffer)


NAMES = ("A", "B", "AB", "TAGS")


@pytest.mark.parametrize("present", [dict(zip(NAMES, values)) for values in
                                     itertools.product(["", "x", None], repeat=len(NAMES))])
@pytest.mark.parametrize("updates", [{}, {"A": "1"}, {"B": "2", "AB": ""}, {"A": "1", "TAGS": "t", "N": "n"}])
def test_set_properties_as_a_dict_update(present: dict, updates: dict):
    properties = {name: value for name, value in present.items() if value is not None}
    result = codec.set_properties(codec.encode_properties(properties), updates)
    assert codec.decode_properties(result) == {**properties, **updates}
    assert len(result) == len(codec.encode_properties({**properties, **updates}))  # no pair left twice


def test_set_properties_removes_every_earlier_pair_of_a_name():
    assert codec.set_properties(b"A\x011\x02B\x012\x02A\x013\x02", {"A": "4"}) == b"B\x012\x02A\x014\x02"


def test_set_properties_refuses_separators_and_oversize():
    with pytest.raises(ValueError):
        codec.set_properties(b"", {"A": "x\x02y"})
    with pytest.raises(ValueError):
        codec.set_properties(b"", {"A": "x" * limits.PROPERTIES_BYTES_MAX})


@pytest.mark.parametrize("body", [b"", b"x", bytes(range(256)) * 5])
def test_with_properties_keeps_the_record_but_the_patch(body: bytes):
    original = record({"TAGS": "red", "UNIQ_KEY": "old", "ROCKETMQ_REPLICATOR_SOURCE": "A"}, body)
    copy = codec.with_properties(original, 6, {"UNIQ_KEY": "new", "REPLICATOR_SRC_OFFSET": "77"})
    assert codec.check_detached(copy, 0) == (Frame.MESSAGE, len(copy))  # a new CRC, assigned fields at 0
    before, after = codec.decode_message(original, 0, ""), codec.decode_message(copy, 0, "")
    assert (after.queue_offset, after.commit_log_offset, after.store_timestamp_ms) == (0, 0, 0)
    assert after.queue_id == 6
    assert after.properties == {"TAGS": "red", "UNIQ_KEY": "new", "ROCKETMQ_REPLICATOR_SOURCE": "A",
                                "REPLICATOR_SRC_OFFSET": "77"}
    for name in ("topic", "flag", "sys_flag", "born_timestamp_ms", "born_host", "reconsume_times", "body"):
        assert getattr(after, name) == getattr(before, name)


def test_with_properties_refuses_what_is_not_one_whole_record():
    original = record({"TAGS": "red"})
    for damaged in (original[:-1], original + b"\x00", b"\x00" * len(original)):
        with pytest.raises(ValueError):
            codec.with_properties(damaged, 0, {"A": "1"})
