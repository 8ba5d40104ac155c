"""The master's SyncStateSet upkeep (core/sync_state.py) and the controller-mode put plan and
ALL_ACK waits (core/quorum.py decision 10), against spec rocketmq-ha.md 2.8 and scenarios 20,
22, 23 and 25, and the metadata side of a slave's join (decision 5)."""

from quorumq.core.put_status import PutStatus
from quorumq.core.quorum import ALL_ACK, AckTracker, BrokerRole, QuorumSettings, plan_put
from quorumq.core.sync_state import MetadataJoin, SyncStateSet, expanded, join_metadata, shrunk, waits_for_join

MASTER = 1


def test_a_caught_up_slave_is_proposed_and_the_union_counts_while_pending():
    """Scenario 25: SSS {1}, slave 2 catches up -> propose {1,2}; until the controller confirms,
    ALL_ACK waits for the union and the size is the larger set."""
    current = SyncStateSet(frozenset({MASTER}), epoch=1)
    proposal = expanded(current, 2, ack_offset=1580, caught_up=True, confirm_offset=1580, epoch_start_offset=0)
    assert proposal == {1, 2}
    pending = SyncStateSet(current.members, current.epoch, pending=proposal)
    assert pending.quorum_members == {1, 2} and pending.size == 2
    confirmed = SyncStateSet(proposal, epoch=2)
    assert confirmed.pending is None and confirmed.size == 2


def test_a_slave_joins_only_when_caught_up_past_confirm_and_epoch_start():
    current = SyncStateSet(frozenset({MASTER}), epoch=1)
    assert expanded(current, 2, 1000, caught_up=False, confirm_offset=0, epoch_start_offset=0) is None
    assert expanded(current, 2, 1000, caught_up=True, confirm_offset=1001, epoch_start_offset=0) is None
    assert expanded(current, 2, 1000, caught_up=True, confirm_offset=0, epoch_start_offset=1001) is None
    assert expanded(SyncStateSet(frozenset({1, 2}), 2), 2, 1000, True, 0, 0) is None  # already a member


def test_scenario_24_an_async_learner_never_joins_however_caught_up():
    current = SyncStateSet(frozenset({MASTER}), epoch=1)
    assert expanded(current, 2, 1000, caught_up=True, confirm_offset=0, epoch_start_offset=0) == {1, 2}
    assert expanded(current, 2, 1000, caught_up=True, confirm_offset=0, epoch_start_offset=0,
                    async_learner=True) is None


def test_the_next_proposal_builds_on_the_pending_one():
    """Decision 3: two changes in a row never report a stale set."""
    pending = SyncStateSet(frozenset({1, 2, 3}), epoch=4, pending=frozenset({1, 2}))
    assert shrunk(pending, MASTER, connected={2}, caught_up_ms={2: 0.0}, now_ms=20_000,
                  max_not_caught_up_ms=15_000) == {1}
    assert expanded(pending, 3, 10, True, 0, 0) == {1, 2, 3}


def test_shrink_drops_the_disconnected_the_lagging_and_the_never_caught_up():
    """Scenario 26: members not caught up for haMaxTimeSlaveNotCatchup, without a connection, or
    never caught up leave; the master stays."""
    current = SyncStateSet(frozenset({1, 2, 3, 4}), epoch=3)
    proposal = shrunk(current, MASTER, connected={2, 3}, caught_up_ms={2: 10_000.0, 3: 1_000.0},
                      now_ms=20_000, max_not_caught_up_ms=15_000)
    assert proposal == {1, 2}
    assert shrunk(SyncStateSet(frozenset({1, 2}), 3), MASTER, {2}, {2: 19_000.0}, 20_000, 15_000) is None


WINDOW_S = 1.5


def test_a_joining_slave_is_ready_once_it_applied_the_version_its_join_began_at():
    """Decision 5: the join begins at the master's version 40; commits 41 and on wait for the
    slave, 40 and older were answered without it; it may be proposed once it applied 40, however
    far the master has gone since."""
    join, ready = join_metadata(None, applied_version=12, version=40, now_s=100.0, window_s=WINDOW_S)
    assert join == MetadataJoin(40, 101.5) and not ready
    assert waits_for_join(join, 41, now_s=100.5) and not waits_for_join(join, 40, now_s=100.5)
    join, ready = join_metadata(join, applied_version=39, version=90, now_s=100.5, window_s=WINDOW_S)
    assert join == MetadataJoin(40, 101.5) and not ready
    assert join_metadata(join, applied_version=40, version=95, now_s=101.0, window_s=WINDOW_S) == (join, True)


def test_a_slave_that_applied_everything_joins_at_once():
    assert join_metadata(None, applied_version=40, version=40, now_s=0.0, window_s=WINDOW_S)[1]


def test_a_lapsed_join_holds_no_change_and_begins_again_after_one_more_window():
    """A slave that never applies (its disk refuses the offsets file) delays commits for a
    window, then for none, then begins again at the master's newer version."""
    join = MetadataJoin(40, 101.5)
    assert not waits_for_join(join, 50, now_s=101.5)
    # It applied 40, but changes answered after the lapse did not wait for it.
    assert join_metadata(join, applied_version=40, version=60, now_s=102.0, window_s=WINDOW_S) == (join, False)
    assert join_metadata(join, applied_version=40, version=60, now_s=103.0, window_s=WINDOW_S) \
        == (MetadataJoin(60, 104.5), False)
    assert not waits_for_join(None, 50, now_s=0.0)


def test_controller_mode_plan_refuses_below_min_and_needs_all_with_all_ack():
    """Scenario 22: minInSyncReplicas 2 with the set shrunk to the master -> refused; with
    allAckInSyncStateSet the put needs every member."""
    settings = QuorumSettings(BrokerRole.SYNC_MASTER, in_sync_replicas=2, min_in_sync_replicas=2,
                              controller_mode=True, all_ack_in_sync_state_set=True)
    assert plan_put(settings, wait_store_msg_ok=True, alive_replicas=1, ha_in_sync=1,
                    sync_state_set_size=1).rejected
    plan = plan_put(settings, wait_store_msg_ok=True, alive_replicas=1, ha_in_sync=1, sync_state_set_size=2)
    assert plan.need_ack == ALL_ACK and plan.waits
    counting = QuorumSettings(BrokerRole.SYNC_MASTER, in_sync_replicas=2, controller_mode=True)
    assert plan_put(counting, wait_store_msg_ok=True, alive_replicas=1, ha_in_sync=1,
                    sync_state_set_size=1).need_ack == 2  # scenario 23: any acking slave counts


def test_all_ack_waits_for_every_member_and_a_shrink_releases():
    """Scenario 20: SSS {1,2,3}; the put waits for 2 and 3; member 3 gone and the set shrunk to
    {1,2} releases it once 2 has acked."""
    tracker = AckTracker()
    tracker.set_sync_state_set(frozenset({2, 3}))
    sessions = {slave: tracker.attach(slave, 0) for slave in (2, 3)}
    for slave in (2, 3):
        tracker.on_sent(slave, sessions[slave], 100)
    assert tracker.add_waiter("put", 100, ALL_ACK, deadline=10.0) is None
    assert tracker.on_slave_ack(2, sessions[2], 100, 100) == []
    tracker.detach(3, sessions[3])
    assert tracker.expire(1.0) == []
    assert tracker.set_sync_state_set(frozenset({2})) == [("put", PutStatus.PUT_OK)]


def test_all_ack_with_the_master_alone_needs_nothing_and_times_out_without_members():
    tracker = AckTracker()
    assert tracker.add_waiter("alone", 50, ALL_ACK, deadline=1.0) is PutStatus.PUT_OK
    tracker.set_sync_state_set(frozenset({2}))
    assert tracker.add_waiter("waits", 50, ALL_ACK, deadline=1.0) is None
    assert tracker.expire(1.0) == [("waits", PutStatus.FLUSH_SLAVE_TIMEOUT)]


def test_what_every_member_holds_is_the_least_ack_and_unknown_while_a_member_is_silent():
    """Scenario 31's bound for reads: the master's end when alone, the least member ack (never
    past the master's end) when every member has acked, unknown while one has not."""
    tracker = AckTracker()
    assert tracker.all_members_hold(500) == 500
    tracker.set_sync_state_set(frozenset({2, 3}))
    sessions = {slave: tracker.attach(slave, 0) for slave in (2, 3)}
    for slave in (2, 3):
        tracker.on_sent(slave, sessions[slave], 400)
    assert tracker.all_members_hold(500) is None
    tracker.on_slave_ack(2, sessions[2], 400, 400)
    assert tracker.all_members_hold(500) is None, "member 3 has not acked: its copy is unknown"
    tracker.on_slave_ack(3, sessions[3], 300, 300)
    assert tracker.all_members_hold(500) == 300
    tracker.detach(3, sessions[3])
    assert tracker.all_members_hold(500) is None
    tracker.set_sync_state_set(frozenset({2}))
    assert tracker.all_members_hold(350) == 350
