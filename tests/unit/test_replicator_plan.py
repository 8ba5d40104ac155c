"""The replicator's pure decisions: offsets as JSON, admission per micro-batch, queue mapping, the
loop check, the replay de-duplication cut, offset syncs and group-offset translation, topic and group
changes, ACL 2.0 users and rules to copy, and which groups the checkpoint job may move."""

import itertools
import json
import random

import pytest

from quorumq.core import replicator as plan
from quorumq.core.acl import entry_from_data, parse_resource
from quorumq.core.auth import User, UserStatus, UserType
from quorumq.core.message_types import TopicMessageType
from quorumq.core.replicator import Access, AccessChanges, OffsetSync, OffsetSyncStore, QueueKey, TopicShape
from quorumq.errors import Error, QuorumqError


def test_offsets_round_trip_through_json_with_names_that_contain_any_joiner():
    offsets = {QueueKey("Orders", "broker|a/b:c", 0): 5, QueueKey("Orders", "broker|a/b:c", 10): 7,
               QueueKey("Pay%ments", "b", 3): 0}
    encoded = plan.encode_offsets(offsets)
    assert encoded["v"] == plan.OFFSETS_VERSION
    assert plan.decode_offsets(json.loads(json.dumps(encoded))) == offsets


@pytest.mark.parametrize("offset", [{}, {"v": 2, "topics": {}}, {"v": 1, "topics": "x"}])
def test_an_offset_of_another_shape_is_refused_with_a_stable_code(offset):
    with pytest.raises(QuorumqError) as raised:
        plan.decode_offsets(offset)
    assert raised.value.error is Error.CONFIG_INVALID


def queues(count):
    return [QueueKey("T", "b", q) for q in range(count)]


def test_admission_without_a_limit_reads_everything():
    q0, q1 = queues(2)
    assert plan.admit({q0: 3, q1: 0}, {q0: 10, q1: 4}, None) == {q0: 10, q1: 4}


def test_admission_shares_the_limit_fairly_and_gives_unused_shares_to_busy_queues():
    q0, q1, q2 = queues(3)
    end = plan.admit({q0: 0, q1: 0, q2: 0}, {q0: 1000, q1: 2, q2: 1000}, 100)
    assert end[q1] == 2 and end[q0] + end[q2] == 98 and abs(end[q0] - end[q2]) <= 1


def test_admission_honours_a_per_queue_cap_and_never_goes_past_the_end():
    q0, q1 = queues(2)
    assert plan.admit({q0: 5, q1: 0}, {q0: 5, q1: 100}, 1000, max_rows_per_queue=30) == {q0: 5, q1: 30}


def test_admission_never_exceeds_the_limit_nor_moves_backwards():
    rng = random.Random(7)
    for _ in range(500):
        keys = queues(rng.randint(1, 9))
        start = {k: rng.randint(0, 50) for k in keys}
        available = {k: start[k] + rng.randint(0, 60) for k in keys}
        limit = rng.randint(1, 200)
        end = plan.admit(start, available, limit)
        assert all(start[k] <= end[k] <= available[k] for k in keys)
        assert sum(end[k] - start[k] for k in keys) == min(limit, sum(available[k] - start[k] for k in keys))


def test_a_queue_maps_to_the_same_broker_and_id_when_the_destination_has_it():
    destination = [("broker-a", 0), ("broker-a", 1), ("broker-b", 0)]
    assert plan.destination_queue(QueueKey("T", "broker-b", 0), 7, destination) == ("broker-b", 0)


def test_otherwise_a_queue_maps_by_its_index_in_the_route():
    destination = [("x", 0), ("x", 1), ("y", 0)]
    assert plan.destination_queue(QueueKey("T", "broker-a", 1), 1, destination) == ("x", 1)
    assert plan.destination_queue(QueueKey("T", "broker-a", 4), 4, destination) == ("x", 1)  # modulo the count
    with pytest.raises(QuorumqError) as raised:
        plan.destination_queue(QueueKey("T", "a", 0), 0, [])
    assert raised.value.error is Error.TOPIC_NOT_FOUND


def test_the_loop_check_uses_the_birth_cluster_of_the_first_hop():
    assert plan.birth_cluster({}, "A") == "A"
    assert plan.birth_cluster({plan.SOURCE_CLUSTER: "C"}, "A") == "C"
    assert plan.loops_back({}, "A", "A")
    assert not plan.loops_back({}, "A", "B")
    assert plan.loops_back({plan.SOURCE_CLUSTER: "B"}, "A", "B"), "born on B, came to A: never back to B"
    assert not plan.loops_back({plan.SOURCE_CLUSTER: "C"}, "A", "B"), "a chain C -> A -> B goes on"


def test_resume_offsets_clamp_a_start_that_retention_passed_and_report_the_loss():
    kept, lost, new = queues(3)
    gone = QueueKey("T", "b", 9)
    offsets, losses = plan.resume_offsets({kept: 40, lost: 5, gone: 7}, {kept: 10, lost: 20, new: 3})
    assert offsets == {kept: 40, lost: 20, new: 3}, "a vanished queue is dropped, a new one starts at its min"
    assert losses == {lost: (5, 20)}
    assert plan.resume_offsets(offsets, {kept: 10, lost: 20, new: 3}) == (offsets, {}), "clamped once: no loss again"


def test_dedupe_cuts_what_the_tail_holds_already():
    offsets = [10, 11, 13, 14]
    assert plan.first_unwritten(offsets, None) == 0
    assert plan.first_unwritten(offsets, 9) == 0
    assert plan.first_unwritten(offsets, 11) == 2
    assert plan.first_unwritten(offsets, 12) == 2
    assert plan.first_unwritten(offsets, 14) == 4
    assert plan.first_unwritten([], 3) == 0


def test_sync_points_keep_the_ends_the_spacing_and_every_gap():
    pairs = [(s, 100 + d) for d, s in enumerate([0, 1, 2, 3, 7, 8, 9])]
    points = plan.sync_points(pairs, spacing=3)
    assert points == [OffsetSync(0, 100), OffsetSync(3, 103), OffsetSync(7, 104), OffsetSync(9, 106)]
    assert plan.sync_points([]) == []


def test_translation_never_skips_a_message_the_group_has_not_consumed():
    """Replay a random replication with filtered gaps and a replayed batch; every group offset
    translates to a destination offset whose copies from there on hold every source message at or
    after the group offset."""
    rng = random.Random(11)
    queue = QueueKey("T", "b", 0)
    for _ in range(50):
        store = OffsetSyncStore(per_queue_max=8)
        destination: list[int] = []  # source offset of each destination offset
        source_offsets = [o for o in range(300) if rng.random() > 0.2]  # the rest filtered
        position = 0
        while position < len(source_offsets):
            batch = source_offsets[position:position + rng.randint(1, 40)]
            if rng.random() < 0.2 and position > 0:  # a replay: the previous batch again
                batch = source_offsets[max(0, position - 10):position + len(batch)]
            pairs = []
            for offset in batch:
                pairs.append((offset, len(destination)))
                destination.append(offset)
            store.add(queue, plan.sync_points(pairs, spacing=5))
            position = source_offsets.index(batch[-1]) + 1
        for group_offset in range(0, 301):
            translated = store.translate(queue, group_offset)
            if translated is None:
                continue
            resumed = set(destination[translated:])
            assert {o for o in source_offsets if o >= group_offset} <= resumed


def test_the_sync_store_is_bounded_and_keeps_old_syncs_sparse():
    store = OffsetSyncStore(per_queue_max=16)
    queue = QueueKey("T", "b", 0)
    store.add(queue, (OffsetSync(s, s + 1000) for s in range(0, 10_000, 10)))
    kept = store.syncs(queue)
    assert len(kept) <= 16 and kept[-1] == OffsetSync(9990, 10990)
    gaps = [b.source_offset - a.source_offset for a, b in itertools.pairwise(kept)]
    assert gaps[0] > gaps[-1], "older syncs lie further apart"
    assert store.translate(queue, 9995) == 10991 and store.translate(queue, 9990) == 10990


def test_translation_is_none_below_every_sync_and_a_replay_replaces_later_history():
    store = OffsetSyncStore()
    queue = QueueKey("T", "b", 0)
    store.add(queue, [OffsetSync(5, 0), OffsetSync(9, 4)])
    assert store.translate(queue, 4) is None
    store.add(queue, [OffsetSync(7, 20)])
    assert store.syncs(queue) == [OffsetSync(5, 0), OffsetSync(7, 20)]
    assert store.translate(queue, 9) == 21


def test_subscription_changes_copy_each_group_as_the_source_configures_it():
    source = {"broker-a": {"g": "A", "h": "H"}, "broker-b": {"g": "B", "k": "K"}}
    target = {"broker-a": {"g": "A", "own": "O"}, "broker-c": {}}
    assert plan.subscription_changes(source, target) == {
        "broker-a": {"h": "H", "k": "K"},  # g as broker-a has it already; its own group stays
        "broker-c": {"g": "A", "h": "H", "k": "K"}}  # no broker-c on the source: the first broker by name
    assert plan.subscription_changes(source, {"broker-a": {"g": "A", "h": "H", "k": "K"}}) == {}
    assert plan.subscription_changes({}, target) == {}


def test_topic_changes_create_expand_and_never_shrink():
    source = {"broker-a": TopicShape(8, 8, 6), "broker-b": TopicShape(4, 4, 6)}
    target = {"broker-a": None, "broker-b": TopicShape(16, 16, 6), "broker-c": TopicShape(2, 2, 6)}
    assert plan.topic_changes(source, target) == {"broker-a": TopicShape(8, 8, 6), "broker-c": TopicShape(8, 8, 6)}
    assert plan.topic_changes(source, {"broker-a": TopicShape(8, 8, 6)}) == {}
    assert plan.topic_changes({"x": TopicShape(4, 4, 4)}, {"x": TopicShape(4, 4, 6)}) == {"x": TopicShape(4, 4, 4)}
    assert plan.topic_changes({}, {"x": None}) == {}


def test_topic_changes_carry_the_source_message_type():
    fifo = TopicShape(4, 4, 6, TopicMessageType.FIFO)
    source = {"broker-a": fifo}
    target = {"broker-a": TopicShape(4, 4, 6), "broker-b": TopicShape(8, 8, 6), "broker-c": None}
    assert plan.topic_changes(source, target) == {  # a NORMAL copy made FIFO, a larger one kept larger
        "broker-a": fifo, "broker-b": TopicShape(8, 8, 6, TopicMessageType.FIFO), "broker-c": fifo}
    assert plan.topic_changes(source, {"broker-a": fifo}) == {}


def test_group_changes_add_missing_groups_from_their_earliest_first_contact():
    source = {"broker-a": {"G1": 500, "G2": 700}, "broker-b": {"G1": 300, "G3": 900}}
    target = {"broker-a": {"G2": 800}, "broker-c": {}}
    assert plan.group_changes(source, target) == {"broker-a": {"G1": 300, "G3": 900},
                                                  "broker-c": {"G1": 300, "G2": 700, "G3": 900}}


def test_group_changes_keep_a_first_contact_the_target_has_and_add_nothing_twice():
    source = {"broker-a": {"G1": 500}}
    assert plan.group_changes(source, {"broker-a": {"G1": 900}}) == {}, "a consumer there may read from 900"
    assert plan.group_changes(source, {"broker-a": {"G1": 100}}) == {}
    assert plan.group_changes({}, {"broker-a": {}}) == {}
    assert plan.group_changes(source, {}) == {}


@pytest.mark.parametrize("text, path", [("run/ck", "run/ck"), ("/mnt/a:b", "/mnt/a:b"), ("file:///mnt/ck", "/mnt/ck"),
                                        ("file://localhost/mnt/a%20b", "/mnt/a b")])
def test_a_checkpoint_is_a_path_or_a_file_url(text, path):
    assert plan.parse_checkpoint(text) == path


@pytest.mark.parametrize("text", ["hdfs:///replicator/a-to-b", "hdfs://nn:8020/r", "s3a://bucket/r",
                                  "file://otherhost/mnt/ck", "file://"])
def test_a_checkpoint_on_another_file_system_is_refused_with_a_stable_code(text):
    with pytest.raises(QuorumqError) as raised:
        plan.parse_checkpoint(text)
    assert raised.value.error is Error.CONFIG_INVALID


@pytest.mark.parametrize("text", ["fail", "dismiss", "my.module:handle"])
def test_failure_policies(text):
    assert plan.parse_failure_policy(text) == text


@pytest.mark.parametrize("text", ["", "retry", "module:", ":f", "m:not-a-name"])
def test_a_bad_failure_policy_is_refused_with_a_stable_code(text):
    with pytest.raises(QuorumqError) as raised:
        plan.parse_failure_policy(text)
    assert raised.value.error is Error.CONFIG_INVALID


def test_the_checkpoint_skips_a_group_with_a_live_consumer_on_any_target_broker():
    live = {"Busy": {"broker-a": 0, "broker-b": 2}, "Idle": {"broker-a": 0, "broker-b": 0}, "Both": {"a": 1, "b": 1}}
    assert plan.groups_to_checkpoint(["Busy", "Idle", "Unknown", "Both"], live) == (["Idle", "Unknown"],
                                                                                   {"Busy": 2, "Both": 2})
    assert plan.groups_to_checkpoint(["Busy"], {}) == (["Busy"], {}), "once its consumers left, it is written again"


def entry(resource: str, *actions: str, decision: str = "Allow"):
    return entry_from_data({"resource": resource, "actions": list(actions), "decision": decision})


ALICE, BOB = User("alice", "pw-a"), User("bob", "pw-b")
ALICE_RULES = (entry("Topic:T", "Pub"), entry("Group:G", "Sub"))


def test_missing_users_and_rules_are_created_differing_ones_updated_and_nothing_deleted_by_default():
    source = {"broker-a": Access({"alice": ALICE, "bob": BOB}, {"User:alice": ALICE_RULES, "User:bob": ALICE_RULES})}
    standby_bob = User("bob", "old", UserType.NORMAL, UserStatus.DISABLE)
    target = {"broker-a": Access({"bob": standby_bob, "carol": User("carol", "pw-c")},
                                 {"User:bob": (entry("Topic:T", "Pub"), entry("Topic:X", "Sub")),
                                  "User:carol": (entry("*", "All"),)}),
              "broker-b": Access({"alice": ALICE, "bob": BOB}, {"User:alice": ALICE_RULES, "User:bob": ALICE_RULES})}
    assert plan.access_changes(source, target, deletes=False) == {
        "broker-a": AccessChanges(create_users=(ALICE,), update_users=(BOB,),
                                  set_rules={"User:alice": ALICE_RULES, "User:bob": ALICE_RULES})}


def test_with_deletes_what_the_source_lacks_goes_but_never_the_replicators_own_user():
    source = {"broker-a": Access({"alice": ALICE}, {"User:alice": (entry("Topic:T", "Pub"),)})}
    target = {"broker-a": Access({"alice": ALICE, "bob": BOB, "replicator": User("replicator", "s", UserType.SUPER)},
                                 {"User:alice": (entry("Topic:T", "Pub"), entry("Topic:X", "Sub")),
                                  "User:bob": ALICE_RULES})}
    assert plan.access_changes(source, target, deletes=True, kept=("replicator",)) == {
        "broker-a": AccessChanges(delete_entries={"User:alice": (parse_resource("Topic:X"),)},
                                  delete_users=("bob",))}, "bob's rules go with bob"
    source["broker-a"] = Access({"alice": ALICE}, {})
    assert plan.access_changes(source, target, deletes=True, kept=("replicator",))["broker-a"].delete_rules == \
        ("User:alice",), "a subject without rules on the source loses them"


def test_the_replicators_own_user_is_never_changed_and_a_user_held_alike_needs_nothing():
    source = {"broker-a": Access({"alice": ALICE, "replicator": User("replicator", "other")},
                                 {"User:alice": ALICE_RULES, "User:replicator": ALICE_RULES})}
    target = {"broker-a": Access({"alice": ALICE, "replicator": User("replicator", "mine", UserType.SUPER)},
                                 {"User:alice": tuple(reversed(ALICE_RULES))})}
    assert plan.access_changes(source, target, deletes=True, kept=("replicator",)) == {}


def test_a_target_broker_gets_the_users_of_the_source_broker_of_its_name_else_of_the_first_by_name():
    renamed = User("alice", "pw-other")
    source = {"broker-b": Access({"alice": renamed}, {}), "broker-a": Access({"alice": ALICE}, {})}
    target = {name: Access({}, {}) for name in ("broker-a", "broker-b", "broker-c")}
    assert {broker: change.create_users for broker, change in plan.access_changes(source, target, False).items()} \
        == {"broker-a": (ALICE,), "broker-b": (renamed,), "broker-c": (ALICE,)}


@pytest.mark.parametrize("seed", range(30))
def test_packing_puts_each_queue_in_one_partition_and_balances_the_rows(seed):
    rng = random.Random(seed)
    rows = {QueueKey("T", f"b{i % 3}", i): rng.randrange(1, 5000) for i in range(rng.randrange(1, 20))}
    parts = rng.randrange(1, 6)
    packed = plan.pack(rows, parts)
    assert sorted(queue for part in packed for queue in part) == sorted(rows)
    assert len(packed) == min(parts, len(rows)) and all(part == sorted(part) for part in packed)
    loads = [sum(rows[queue] for queue in part) for part in packed]
    # The greedy fill leaves no partition heavier than the lightest by more than one queue's rows.
    assert max(loads) - min(loads) <= max(rows.values())


def test_without_a_bound_each_queue_has_its_own_partition():
    rows = {QueueKey("T", "b", 1): 10, QueueKey("T", "b", 0): 5}
    assert plan.pack(rows, None) == [[QueueKey("T", "b", 0)], [QueueKey("T", "b", 1)]]
    assert plan.pack(rows, 5) == [[QueueKey("T", "b", 0)], [QueueKey("T", "b", 1)]]
