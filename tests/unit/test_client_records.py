"""The pull consumer decodes whole commit-log records and checks each CRC before trusting it."""

import tempfile
from pathlib import Path

import pytest

from quorumq.client.consumer import decode_records
from quorumq.client.errors import ClientError
from quorumq.clock import Clock
from quorumq.store import MessageIn, MessageStore


@pytest.fixture(scope="module")
def records() -> bytes:
    with tempfile.TemporaryDirectory() as directory:
        store = MessageStore(Path(directory), segment_bytes=1 << 20, store_host="127.0.0.1:1", clock=Clock())
        store.open()
        store.append([MessageIn(topic="T", queue_id=2, body=f"body-{i}".encode(), born_timestamp_ms=7,
                                born_host="127.0.0.1:9", properties={"TAGS": "red", "KEYS": "k1 k2",
                                                                     "UNIQ_KEY": f"ID{i}", "color": "x"})
                      for i in range(3)])
        result = store.get_records("T", 2, 0, 10, 1 << 20)
        store.close()
    return b"".join(result.messages)


def test_records_decode_to_messages(records):
    messages = decode_records(records, "broker-a", "127.0.0.1:1")
    assert [(m.queue_offset, m.body, m.message_id) for m in messages] == [
        (0, b"body-0", "ID0"), (1, b"body-1", "ID1"), (2, b"body-2", "ID2")]
    first = messages[0]
    assert (first.topic, first.queue_id, first.tag, first.keys, first.properties, first.broker_name) == (
        "T", 2, "red", ("k1", "k2"), {"color": "x"}, "broker-a")
    assert first.born_timestamp_ms == 7 and first.store_timestamp_ms > 0 and first.store_host == "127.0.0.1:1"


@pytest.mark.parametrize("position", [40, 120, -3])
def test_a_flipped_byte_is_caught(records, position):
    damaged = bytearray(records)
    damaged[position] ^= 0xFF
    with pytest.raises(ClientError) as raised:
        decode_records(bytes(damaged), "broker-a", "127.0.0.1:1")
    assert raised.value.name == "MESSAGE_CORRUPTED"


def test_a_cut_record_is_caught(records):
    with pytest.raises(ClientError):
        decode_records(records[:-5], "broker-a", "127.0.0.1:1")
