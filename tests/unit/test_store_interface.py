"""The `Store` interface: the same behaviour from the file store and the in-memory store, so a pure
test can stand the one in for the other."""

import pytest
from test_store_support import STORE_HOST, ManualClock, message, open_store

from quorumq.core import codec
from quorumq.errors import Error, QuorumqError
from quorumq.store import GetStatus, MemoryStore, Store


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture(params=["files", "memory"])
def store(request, tmp_path, clock):
    if request.param == "memory":
        yield MemoryStore(clock=clock, store_host=STORE_HOST)
        return
    opened = open_store(tmp_path / "s", clock)
    yield opened
    opened.close()


def bodies(result) -> list[bytes]:
    return [stored.body for stored in result.messages]


def test_append_then_read_back(store: Store):
    first = store.append([message(0), message(1, queue_id=1), message(2)])
    assert [queue_offset for _, queue_offset in first.offsets] == [0, 0, 1]
    assert first.offsets[0][0] == 0 and first.end_offset == store.max_offset
    assert store.append([]).end_offset == store.max_offset
    result = store.get_messages("T", 0, 0, 10, 1 << 20)
    assert (result.status, bodies(result)) == (GetStatus.FOUND, [message(0).body, message(2).body])
    assert (result.next_offset, result.min_offset, result.max_offset) == (2, 0, 2)
    stored = result.messages[1]
    assert (stored.topic, stored.queue_id, stored.queue_offset, stored.commit_log_offset) == \
        ("T", 0, 1, first.offsets[2][0])
    assert (stored.store_host, stored.store_timestamp_ms) == (STORE_HOST, ManualClock().now)
    records = store.get_records("T", 0, 0, 10, 1 << 20).messages
    assert [codec.decode_message(record, 0, STORE_HOST) for record in records] == result.messages
    assert store.topics() == ["T"] and store.topic_queue_ids("T") == [0, 1]


def test_queue_offsets_and_statuses(store: Store):
    store.append([message(index) for index in range(3)])
    assert (store.queue_min_offset("T", 0), store.queue_max_offset("T", 0)) == (0, 3)
    assert (store.queue_min_offset("T", 5), store.queue_max_offset("T", 5)) == (0, 0)
    second = store.get_messages("T", 0, 1, 1, 1 << 20).messages[0]
    assert store.commit_log_offset_of("T", 0, 1) == second.commit_log_offset
    assert store.commit_log_offset_of("T", 0, 3) is None
    assert store.get_messages("T", 0, 3, 10, 1 << 20).status is GetStatus.OFFSET_OVERFLOW_ONE
    badly = store.get_messages("T", 0, 9, 10, 1 << 20)
    assert (badly.status, badly.next_offset) == (GetStatus.OFFSET_OVERFLOW_BADLY, 3)
    assert store.get_messages("T", 7, 0, 10, 1 << 20).status is GetStatus.NO_MESSAGE_IN_QUEUE
    limited = store.get_messages("T", 0, 1, 1, 1 << 20)
    assert (bodies(limited), limited.next_offset) == ([message(1).body], 2)
    one = store.get_messages("T", 0, 0, 10, 1)  # max_bytes below one message still returns one
    assert len(one.messages) == 1 and one.next_offset == 1


def test_tags_filter(store: Store):
    tags = ["red", "blue", None, "red"]
    store.append([message(index, tag=tag) for index, tag in enumerate(tags)])
    red = frozenset({codec.tag_hash("red")})
    result = store.get_messages("T", 0, 0, 10, 1 << 20, red)
    assert (bodies(result), result.next_offset) == ([message(0).body, message(3).body], 4)
    none = store.get_messages("T", 0, 1, 10, 1 << 20, frozenset({codec.tag_hash("green")}))
    assert (none.status, none.messages, none.next_offset) == (GetStatus.NO_MATCHED_MESSAGE, [], 4)


def test_reads_end_at_readable_end(store: Store):
    appended = store.append([message(0), message(1, queue_id=1), message(2)])
    bound = appended.offsets[2][0]
    assert bodies(store.get_messages("T", 0, 0, 10, 1 << 20, readable_end=bound)) == [message(0).body]
    waiting = store.get_messages("T", 0, 1, 10, 1 << 20, readable_end=bound)
    assert (waiting.status, waiting.next_offset, waiting.max_offset) == (GetStatus.OFFSET_OVERFLOW_ONE, 1, 2)
    assert bodies(store.get_messages("T", 0, 1, 10, 1 << 20, readable_end=appended.end_offset)) == [message(2).body]


def test_offset_for_timestamp(store: Store, clock: ManualClock):
    for index, now in enumerate((1000, 2000, 3000)):
        clock.now = now
        store.append([message(index)])
    assert [store.offset_for_timestamp("T", 0, at) for at in (0, 1000, 1001, 3000, 3001)] == [0, 0, 1, 2, 3]
    assert store.offset_for_timestamp("U", 0, 0) == 0


def test_bad_message_rejects_the_whole_batch(store: Store):
    store.append([message(0)])
    end = store.max_offset
    for bad, error in [([message(1), message(2, topic="x" * 128)], Error.ILLEGAL_TOPIC),
                       ([message(1), message(2, queue_id=-1)], Error.BAD_REQUEST),
                       ([message(index) for index in range(1025)], Error.BATCH_TOO_LARGE)]:
        with pytest.raises(QuorumqError) as caught:
            store.append(bad)
        assert caught.value.error is error
    assert store.max_offset == end
    assert store.append([message(3)]).offsets[0][1] == 1  # no queue offset was used up


def test_truncate_cuts_the_log_and_the_queues(store: Store):
    appended = store.append([message(0), message(1, queue_id=1), message(2), message(3, queue_id=1)])
    cut = appended.offsets[2][0]
    with pytest.raises(ValueError):
        store.truncate(cut + 1)  # not where a record starts
    store.truncate(cut)
    assert store.max_offset == cut
    assert (store.queue_max_offset("T", 0), store.queue_max_offset("T", 1)) == (1, 1)
    again = store.append([message(4)])
    assert again.offsets == [(cut, 1)]
    assert bodies(store.get_messages("T", 0, 0, 10, 1 << 20)) == [message(0).body, message(4).body]


def test_delete_topic_drops_its_queues_only(store: Store):
    store.append([message(0), message(1, topic="U")])
    assert store.delete_topic("T") and not store.delete_topic("T")
    assert store.topics() == ["U"] and store.queue_max_offset("T", 0) == 0
    assert store.append([message(2)]).offsets[0][1] == 0  # a topic made again starts at 0
