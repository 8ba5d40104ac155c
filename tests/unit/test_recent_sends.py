"""The ids of recently stored messages that turn a client's retry into the first copy's outcome."""

import pytest
from test_store_support import message, open_store

from quorumq.core.properties import MESSAGE_ID
from quorumq.core.recent_sends import RecentSends, StoredCopy, window_start


def test_remembers_the_newest_ids_up_to_its_capacity():
    recent = RecentSends(capacity=2)
    for index, message_id in enumerate(["a", "b", "c"]):
        recent.add(message_id, StoredCopy(0, index, 100 * (index + 1)))
    assert recent.get("a") is None
    assert recent.get("b") == StoredCopy(0, 1, 200) and recent.get("c") == StoredCopy(0, 2, 300)
    recent.add("b", StoredCopy(1, 5, 400))  # stored again: the newest copy counts and it is kept longest
    recent.add("d", StoredCopy(0, 3, 500))
    assert recent.get("c") is None and recent.get("b") == StoredCopy(1, 5, 400) and len(recent) == 2


def test_messages_without_an_id_are_never_deduplicated():
    recent = RecentSends(capacity=2)
    recent.add("", StoredCopy(0, 0, 10))
    assert recent.get("") is None and len(recent) == 0


def test_a_batch_rebuilt_from_the_log_is_found_whole_by_its_first_and_last_records():
    """A new master rebuilds one entry per record: a SendBatch resend (request id = its first
    record's id) is answered from the copy only when its last record follows in the same queue."""
    recent = RecentSends()
    for index, message_id in enumerate(["f", "m", "l"]):
        recent.add(message_id, StoredCopy(2, 10 + index, 1000 + 100 * index))
    assert recent.batch("f", 2, 3, lambda: "l") == StoredCopy(2, 10, 1200, 3)
    assert recent.batch("f", 2, 1, lambda: "unused") == StoredCopy(2, 10, 1000)
    assert recent.batch("f", 1, 3, lambda: "l") is None  # another queue
    assert recent.batch("f", 2, 3, lambda: "x") is None  # only a prefix was copied: store it again
    assert recent.batch("f", 2, 2, lambda: "l") is None  # not the batch that was stored
    recent.add("g", StoredCopy(0, 5, 2000, 4))  # stored live: its entry names the whole batch
    assert recent.batch("g", 0, 4, lambda: pytest.fail("the live copy is whole")) == StoredCopy(0, 5, 2000, 4)


def test_the_window_starts_at_the_nth_newest_record_of_all_queues():
    queues = [iter([900, 500, 100]), iter([800, 700]), iter([]), iter([600, 300])]
    assert window_start(queues, 4) == 600
    assert window_start([iter([30, 20]), iter([10])], 3) == 10
    assert window_start([iter([30, 20]), iter([10])], 4) is None  # fewer records: the whole log


def test_a_store_gives_the_ids_of_its_last_records_oldest_first(tmp_path):
    """Only the tail is read, from the n-th newest record of all queues, across segments."""
    store = open_store(tmp_path)
    for index in range(40):
        item = message(index, queue_id=index % 3, body_bytes=3000)  # 64 KiB segments: two of them
        item.properties = {**item.properties, MESSAGE_ID: f"id-{index}"}
        appended = store.append([item])
    assert store.min_offset < store.last_segment_start
    found = store.recent_message_ids(5)
    assert [entry[0] for entry in found] == [f"id-{index}" for index in range(35, 40)]
    assert found[-1] == ("id-39", 39 % 3, 39 // 3, appended.end_offset)
    assert [entry[0] for entry in store.recent_message_ids(1000)] == [f"id-{index}" for index in range(40)]
