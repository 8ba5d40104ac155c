"""The ids of recently stored messages that turn a client's retry into the first copy's outcome."""

from quorumq.core.recent_sends import RecentSends, StoredCopy


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
