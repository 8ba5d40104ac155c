"""The RIP-34 decisions of core/quorum.py, checked against spec rocketmq-ha.md sections 1 and 4.

Method: pure calls with explicit inputs. Store-level scenarios (1-10, 15-18) become the plan and
status decisions they imply; scenarios 11-14 are the counting boundaries of RocketMQ's HAServerTest,
reproduced on the tracker; the seeds' worked examples (2 copies/inSync 2, 3/2, 4/3) are degradation
tables. Each RocketMQ quirk the module fixes has a test named after it.
"""

import itertools
import random

import pytest

from quorumq import limits
from quorumq.core.put_status import PutStatus
from quorumq.core.quorum import (
    ALL_ACK,
    AckPlan,
    AckRejected,
    AckTracker,
    BrokerRole,
    QuorumSettings,
    alive_replicas_in_group,
    calc_need_ack,
    final_status,
    is_in_sync,
    plan_put,
)
from quorumq.errors import Error, QuorumqError

OK = PutStatus.PUT_OK
TIMEOUT = PutStatus.FLUSH_SLAVE_TIMEOUT
GAP = limits.HA_MAX_GAP_NOT_IN_SYNC_DEFAULT


def settings(total_in_sync=1, minimum=1, auto=False, acting=True, role=BrokerRole.SYNC_MASTER):
    return QuorumSettings(broker_role=role, in_sync_replicas=total_in_sync, min_in_sync_replicas=minimum,
                          enable_auto_in_sync_replicas=auto, enable_slave_acting_master=acting)


def tracker_with_acks(*acks: int) -> tuple[AckTracker, list[int]]:
    """Slaves 1..n, each sent far enough and acking the given offset."""
    tracker = AckTracker()
    sessions = []
    for slave_id, ack in enumerate(acks, start=1):
        session = tracker.attach(slave_id, 0)
        tracker.on_sent(slave_id, session, 1 << 40)
        tracker.on_slave_ack(slave_id, session, ack, ack)
        sessions.append(session)
    return tracker, sessions


# Defaults and settings.

def test_defaults_are_rocketmqs_and_the_gap_is_256_mib_not_256k():
    defaults = QuorumSettings()
    assert defaults.broker_role is BrokerRole.ASYNC_MASTER
    assert (defaults.in_sync_replicas, defaults.min_in_sync_replicas) == (1, 1)
    assert defaults.enable_auto_in_sync_replicas is False and defaults.enable_slave_acting_master is False
    assert defaults.ha_max_gap_not_in_sync == 268435456 == 256 * 1024 * 1024


@pytest.mark.parametrize("field", ["in_sync_replicas", "min_in_sync_replicas", "ha_max_gap_not_in_sync"])
def test_settings_refuse_values_below_one(field):
    with pytest.raises(ValueError):
        QuorumSettings(**{field: 0})


# calc_need_ack.

@pytest.mark.parametrize("in_sync, replicas, minimum, auto, expected", [
    (3, 2, 1, False, 2),  # without auto the configured count stands
    (1, 2, 1, False, 2),
    (1, 2, 1, True, 1),  # 2 -> 1
    (2, 3, 1, True, 2),
    (5, 3, 1, True, 3),  # never above inSyncReplicas
    (1, 2, 2, True, 2),  # never below the floor
    (1, 1, 3, True, 3),  # a floor above inSyncReplicas wins (RocketMQ does not forbid it)
])
def test_calc_need_ack(in_sync, replicas, minimum, auto, expected):
    assert calc_need_ack(in_sync, replicas, minimum, auto) == expected


# Spec scenarios 1-10 and 15-19 as decisions.

def test_scenario_1_defaults_never_wait_even_on_a_sync_master():
    plan = plan_put(settings(acting=False), wait_store_msg_ok=True, alive_replicas=2, ha_in_sync=2)
    assert plan == AckPlan(1, False) and not plan.waits


def test_scenario_2_and_3_plain_sync_master_waits_with_no_pre_check():
    for ha_in_sync in (1, 2):  # slave up or down: no pre-check without slaveActingMaster
        plan = plan_put(settings(2, acting=False), wait_store_msg_ok=True, alive_replicas=1, ha_in_sync=ha_in_sync)
        assert plan == AckPlan(2, False) and plan.waits
    tracker = AckTracker()  # scenario 3: no slave connected -> the put times out, no early failure
    assert tracker.add_waiter("put", 100, 2, deadline=3.0) is None
    assert tracker.expire(2.999) == []
    assert tracker.expire(3.0) == [("put", TIMEOUT)]


def test_scenario_4_acting_master_without_auto_rejects_before_appending():
    plan = plan_put(settings(2), wait_store_msg_ok=True, alive_replicas=1, ha_in_sync=2)
    assert plan.rejected and plan.need_ack == 2


def test_scenario_5_adaptive_degradation_2_2_1():
    plan = plan_put(settings(2, 1, auto=True), wait_store_msg_ok=True, alive_replicas=1, ha_in_sync=1)
    assert plan == AckPlan(1, False) and not plan.waits


def test_scenario_6_three_replicas_both_slaves_removed():
    assert plan_put(settings(2, 1, auto=True), wait_store_msg_ok=True, alive_replicas=1,
                    ha_in_sync=1) == AckPlan(1, False)
    assert plan_put(settings(2, 1, auto=False), wait_store_msg_ok=True, alive_replicas=1,
                    ha_in_sync=1).rejected


def test_scenario_7_one_of_two_slaves_down_still_needs_two_and_the_other_acks():
    plan = plan_put(settings(2), wait_store_msg_ok=True, alive_replicas=2, ha_in_sync=2)
    assert plan == AckPlan(2, False)
    tracker = AckTracker()
    session = tracker.attach(2, 0)
    tracker.on_sent(2, session, 500)
    assert tracker.add_waiter("put", 500, plan.need_ack, 3.0) is None
    assert tracker.on_slave_ack(2, session, 500, 0) == [("put", OK)]


def test_scenario_8_four_replicas_in_sync_3_any_two_slaves_release():
    for pair in itertools.combinations([1, 2, 3], 2):
        tracker = AckTracker()
        sessions = {slave_id: tracker.attach(slave_id, 0) for slave_id in (1, 2, 3)}
        for slave_id, session in sessions.items():
            tracker.on_sent(slave_id, session, 1000)
        assert tracker.add_waiter("put", 1000, 3, 3.0) is None
        first, second = pair
        assert tracker.on_slave_ack(first, sessions[first], 1000, 1000) == []
        assert tracker.on_slave_ack(second, sessions[second], 1000, 1000) == [("put", OK)]


def test_scenario_9_floor_3_2_2_both_slaves_down_rejects():
    plan = plan_put(settings(2, 2, auto=True), wait_store_msg_ok=True, alive_replicas=1, ha_in_sync=1)
    assert plan == AckPlan(2, True)


def test_scenario_10_a_lagging_slave_is_not_in_sync():
    tracker, _ = tracker_with_acks(1000)
    master = 1000 + GAP  # lag == gap: out (strict <)
    ha_in_sync = tracker.in_sync_count(master, GAP)
    assert ha_in_sync == 1
    assert plan_put(settings(2, 1, auto=True), wait_store_msg_ok=True, alive_replicas=2,
                    ha_in_sync=ha_in_sync) == AckPlan(1, False)
    assert plan_put(settings(2, 1, auto=False), wait_store_msg_ok=True, alive_replicas=2,
                    ha_in_sync=ha_in_sync).rejected
    assert tracker.in_sync_count(master - 1, GAP) == 2  # lag == gap - 1: in


def test_scenario_15_a_message_that_does_not_wait_skips_pre_check_and_wait():
    plan = plan_put(settings(3), wait_store_msg_ok=False, alive_replicas=1, ha_in_sync=1)
    assert plan == AckPlan(1, False)


def test_scenario_16_async_master_ignores_in_sync_replicas():
    plan = plan_put(settings(3, role=BrokerRole.ASYNC_MASTER), wait_store_msg_ok=True, alive_replicas=1,
                    ha_in_sync=1)
    assert plan == AckPlan(1, False)


def test_slave_role_never_waits():  # its puts are refused before (scenario 19, the broker's pre-check)
    assert plan_put(settings(3, role=BrokerRole.SLAVE), wait_store_msg_ok=True, alive_replicas=3,
                    ha_in_sync=3) == AckPlan(1, False)


def test_scenario_17_alive_count_from_the_member_group():
    assert alive_replicas_in_group({0, 1}, 0) == 2
    assert alive_replicas_in_group({1}, 0) == 2  # self missing: counted anyway
    assert alive_replicas_in_group([], 0) == 1
    assert alive_replicas_in_group([0, 0, 1], 0) == 2


def test_scenario_18_slave_timeout_overrides_flush_timeout():
    assert final_status(PutStatus.FLUSH_DISK_TIMEOUT, TIMEOUT) is TIMEOUT
    assert final_status(PutStatus.FLUSH_DISK_TIMEOUT, OK) is PutStatus.FLUSH_DISK_TIMEOUT
    assert final_status(OK, OK) is OK


# Scenarios 11-14: RocketMQ's HAServerTest counting boundaries.

def test_scenario_11_in_sync_gap_boundary_is_strict():
    """Slaves ack 123, 124, 123, 125: inSyncReplicasNums(gap)=5, (123+gap)=3, (124+gap)=2, (125+gap)=1."""
    tracker, _ = tracker_with_acks(123, 124, 123, 125)
    assert tracker.in_sync_count(GAP, GAP) == 5
    assert tracker.in_sync_count(123 + GAP, GAP) == 3
    assert tracker.in_sync_count(124 + GAP, GAP) == 2
    assert tracker.in_sync_count(125 + GAP, GAP) == 1


def test_scenario_12_is_slave_ok_boundary():
    """Slaves at 123 and 124: isSlaveOK(122+gap) is true, isSlaveOK(124+gap) is false."""
    tracker, _ = tracker_with_acks(123, 124)
    assert tracker.is_slave_ok(122 + GAP, GAP)
    assert not tracker.is_slave_ok(124 + GAP, GAP)
    assert not AckTracker().is_slave_ok(0, GAP)  # no slave connected


def test_scenario_13_single_waiter_times_out_without_slaves_then_succeeds_after_an_ack():
    """RocketMQ's putRequest_SingleAck uses ackNums=1, a GroupTransferService branch the put path
    never reaches; here need 1 never waits (quirk decision 6), so the scenario runs with need 2."""
    tracker = AckTracker()
    assert tracker.add_waiter("one", 124, 1, 4.0) is OK  # need 1: nothing waits
    assert tracker.add_waiter("first", 124, 2, 4.0) is None
    assert tracker.next_deadline() == 4.0
    assert tracker.expire(4.0) == [("first", TIMEOUT)]
    session = tracker.attach(1, 0)
    tracker.on_sent(1, session, 124)
    assert tracker.on_slave_ack(1, session, 124, 124) == []
    assert tracker.add_waiter("second", 124, 2, 8.0) is OK  # already acked: no wait
    assert tracker.waiting == 0


def test_scenario_14_multiple_acks_and_requests():
    """ackNums=2 and ackNums=3 queued; one slave acks 125 -> the first PUT_OK, the second
    FLUSH_SLAVE_TIMEOUT. A second slave at 128 -> a new ackNums=3 -> PUT_OK."""
    tracker = AckTracker()
    assert tracker.add_waiter("two", 125, 2, 4.0) is None
    assert tracker.add_waiter("three", 125, 3, 4.0) is None
    first = tracker.attach(1, 0)
    tracker.on_sent(1, first, 200)
    assert tracker.on_slave_ack(1, first, 125, 125) == [("two", OK)]
    assert tracker.expire(4.0) == [("three", TIMEOUT)]
    second = tracker.attach(2, 0)
    tracker.on_sent(2, second, 200)
    assert tracker.on_slave_ack(2, second, 128, 128) == []
    assert tracker.add_waiter("three again", 125, 3, 8.0) is OK


# The seeds' worked examples: degradation tables.

def seed_plan(total_in_sync, minimum, auto, alive, ha_in_sync):
    plan = plan_put(settings(total_in_sync, minimum, auto), wait_store_msg_ok=True, alive_replicas=alive,
                    ha_in_sync=ha_in_sync)
    return "reject" if plan.rejected else plan.need_ack


@pytest.mark.parametrize("alive, in_sync, auto_on, auto_off", [
    (2, 2, 2, 2),  # healthy: wait for the slave
    (1, 1, 1, "reject"),  # slave dead: degrade to master-only, or refuse
    (2, 1, 1, "reject"),  # slave alive but lagging
])
def test_seed_2_copies_in_sync_2(alive, in_sync, auto_on, auto_off):
    assert seed_plan(2, 1, True, alive, in_sync) == auto_on
    assert seed_plan(2, 1, False, alive, in_sync) == auto_off


@pytest.mark.parametrize("alive, in_sync, auto_on, auto_off", [
    (3, 3, 2, 2),
    (2, 2, 2, 2),  # one slave down: the other still makes 2
    (3, 2, 2, 2),  # one slave lagging
    (1, 1, 1, "reject"),  # both down
    (3, 1, 1, "reject"),  # both lagging
])
def test_seed_3_copies_in_sync_2(alive, in_sync, auto_on, auto_off):
    assert seed_plan(2, 1, True, alive, in_sync) == auto_on
    assert seed_plan(2, 1, False, alive, in_sync) == auto_off


@pytest.mark.parametrize("alive, in_sync, auto_on, auto_off", [
    (4, 4, 3, 3),
    (3, 3, 3, 3),  # one slave down
    (2, 2, 2, "reject"),  # two down: 3 -> 2
    (1, 1, 1, "reject"),
    (4, 2, 2, "reject"),  # alive but lagging counts as not in sync
])
def test_seed_4_copies_in_sync_3(alive, in_sync, auto_on, auto_off):
    assert seed_plan(3, 1, True, alive, in_sync) == auto_on
    assert seed_plan(3, 1, False, alive, in_sync) == auto_off


def test_seed_4_copies_in_sync_3_with_floor_2():
    assert seed_plan(3, 2, True, 2, 2) == 2
    assert seed_plan(3, 2, True, 1, 1) == "reject"


def test_in_sync_is_the_smaller_of_alive_and_ha_count():
    assert seed_plan(2, 1, False, 1, 2) == "reject"  # name server lost the slave, HA still connected
    assert seed_plan(2, 1, False, 2, 1) == "reject"


# The quirk fixes.

def test_quirk_fix_a_slave_with_two_connections_counts_once():
    tracker = AckTracker()
    old = tracker.attach(1, 0)
    tracker.on_sent(1, old, 100)
    tracker.on_slave_ack(1, old, 100, 100)
    new = tracker.attach(1, 0)  # the same slave connects again
    tracker.on_sent(1, new, 100)
    assert tracker.add_waiter("put", 100, 3, 5.0) is None
    assert tracker.on_slave_ack(1, new, 100, 100) == []  # still one slave: need 3 unmet
    assert tracker.on_slave_ack(1, old, 100, 100) == []  # the replaced session is ignored
    assert tracker.in_sync_count(100, GAP) == 2
    assert not tracker.detach(1, old) and tracker.detach(1, new)
    assert tracker.slaves == {}


def test_quirk_fix_an_ack_beyond_what_was_sent_is_rejected():
    tracker = AckTracker()
    session = tracker.attach(1, 50)  # the slave's log ended at 50: it may report up to 50
    tracker.on_slave_ack(1, session, 50, 50)
    with pytest.raises(AckRejected):
        tracker.on_slave_ack(1, session, 51, 50)
    tracker.on_sent(1, session, 80)
    tracker.on_slave_ack(1, session, 80, 60)
    with pytest.raises(AckRejected):
        tracker.on_slave_ack(1, session, 80, 81)  # flushed above written
    with pytest.raises(AckRejected):
        tracker.on_slave_ack(1, session, 79, 60)  # written goes back
    with pytest.raises(AckRejected):
        tracker.on_slave_ack(1, session, 80, 59)  # flushed goes back


def test_quirk_fix_a_fresh_slave_that_has_not_acked_is_not_in_sync():
    tracker = AckTracker()
    session = tracker.attach(1, 0)
    assert tracker.in_sync_count(0, GAP) == 1  # RocketMQ's -1 would count it (0 - -1 < gap)
    assert not is_in_sync(0, None, GAP)
    tracker.on_slave_ack(1, session, 0, 0)
    assert tracker.in_sync_count(0, GAP) == 2


def test_too_many_slaves_are_refused_but_a_reconnect_is_not():
    tracker = AckTracker(slaves_max=2)
    tracker.attach(1, 0)
    tracker.attach(2, 0)
    with pytest.raises(AckRejected):
        tracker.attach(3, 0)
    tracker.attach(2, 0)


# The waiter queue.

def test_sync_flush_slave_counts_flushed_bytes():
    tracker = AckTracker()
    session = tracker.attach(1, 0, acks_flushed=True)
    tracker.on_sent(1, session, 300)
    assert tracker.add_waiter("put", 300, 2, 5.0) is None
    assert tracker.on_slave_ack(1, session, 300, 100) == []
    assert tracker.in_sync_count(300 + GAP - 200, GAP) == 1  # lag counted from the flushed offset
    assert tracker.on_slave_ack(1, session, 300, 300) == [("put", OK)]


def test_waiters_release_in_order_and_need_one_never_waits():
    tracker = AckTracker()
    session = tracker.attach(1, 0)
    tracker.on_sent(1, session, 1000)
    for index in range(10):
        assert tracker.add_waiter(index, 100 * (index + 1), 2, 5.0) is None
    assert tracker.add_waiter("nothing", 5000, 0, 5.0) is OK
    assert tracker.add_waiter("nothing", 5000, 1, 5.0) is OK
    assert tracker.on_slave_ack(1, session, 350, 0) == [(0, OK), (1, OK), (2, OK)]
    assert tracker.on_slave_ack(1, session, 350, 0) == []
    assert tracker.on_slave_ack(1, session, 1000, 0) == [(index, OK) for index in range(3, 10)]
    assert tracker.waiting == 0 and tracker.next_deadline() is None


def test_waiters_added_out_of_offset_order_still_release_correctly():
    tracker = AckTracker()
    session = tracker.attach(1, 0)
    tracker.on_sent(1, session, 1000)
    tracker.add_waiter("late", 300, 2, 5.0)
    tracker.add_waiter("early", 100, 2, 5.0)
    assert tracker.on_slave_ack(1, session, 150, 0) == [("early", OK)]
    assert tracker.on_slave_ack(1, session, 300, 0) == [("late", OK)]


def test_mixed_needs_release_in_arrival_order():
    tracker = AckTracker()
    sessions = {slave_id: tracker.attach(slave_id, 0) for slave_id in (1, 2)}
    for slave_id, session in sessions.items():
        tracker.on_sent(slave_id, session, 1000)
    tracker.add_waiter("a3", 100, 3, 5.0)
    tracker.add_waiter("b2", 200, 2, 5.0)
    tracker.add_waiter("c3", 300, 3, 5.0)
    assert tracker.on_slave_ack(1, sessions[1], 300, 0) == [("b2", OK)]
    assert tracker.on_slave_ack(2, sessions[2], 300, 0) == [("a3", OK), ("c3", OK)]


def test_expired_waiters_are_not_released_again():
    tracker = AckTracker()
    session = tracker.attach(1, 0)
    tracker.on_sent(1, session, 1000)
    tracker.add_waiter("a", 100, 2, 1.0)
    tracker.add_waiter("b", 200, 2, 2.0)
    assert tracker.next_deadline() == 1.0
    assert tracker.expire(1.5) == [("a", TIMEOUT)]
    assert tracker.next_deadline() == 2.0
    assert tracker.on_slave_ack(1, session, 1000, 0) == [("b", OK)]
    assert tracker.expire(10.0) == [] and tracker.waiting == 0


def test_a_detached_slave_no_longer_counts():
    tracker, sessions = tracker_with_acks(500)
    assert tracker.add_waiter("put", 400, 2, 5.0) is OK
    tracker.detach(1, sessions[0])
    assert tracker.add_waiter("put", 400, 2, 5.0) is None
    assert tracker.in_sync_count(500, GAP) == 1


def test_release_all_answers_every_waiter_with_timeout():
    tracker = AckTracker()
    tracker.add_waiter("a", 100, 2, 5.0)
    tracker.add_waiter("b", 100, 3, 5.0)
    assert tracker.release_all() == [("a", TIMEOUT), ("b", TIMEOUT)]
    assert tracker.waiting == 0 and tracker.next_deadline() is None


def test_waiter_limit_rejects_instead_of_growing():
    tracker = AckTracker(waiters_max=3)
    for index in range(3):
        tracker.add_waiter(index, 100, 2, 5.0)
    with pytest.raises(QuorumqError) as raised:
        tracker.add_waiter("one too many", 100, 2, 5.0)
    assert raised.value.error is Error.TOO_MANY_REQUESTS


def test_quorum_and_confirmed_offsets():
    tracker, _ = tracker_with_acks(300, 100, 200)
    assert tracker.quorum_offset(1, 400) == 400
    assert tracker.quorum_offset(2, 400) == 300
    assert tracker.quorum_offset(3, 400) == 200
    assert tracker.quorum_offset(4, 400) == 100
    assert tracker.quorum_offset(5, 400) is None
    assert tracker.quorum_offset(2, 250) == 250  # never above the master's own end
    assert tracker.confirmed_offset(400) == 100
    assert AckTracker().confirmed_offset(400) == 400


def test_random_acks_agree_with_a_brute_force_model():
    """Seeded: random slaves, sends, acks, waiters and expiries against a direct recomputation."""
    rng = random.Random(20260301)
    for _ in range(200):
        tracker = AckTracker()
        sessions, sent, acked = {}, {}, {}
        pending = {}  # token -> (next_offset, need, deadline)
        results = {}
        now = 0.0
        for step in range(60):
            action = rng.random()
            if action < 0.15:
                slave_id = rng.randint(1, 4)
                sessions[slave_id] = tracker.attach(slave_id, 0)
                sent[slave_id], acked[slave_id] = 0, None
            elif action < 0.35 and sessions:
                slave_id = rng.choice(list(sessions))
                sent[slave_id] += rng.randint(0, 100)
                tracker.on_sent(slave_id, sessions[slave_id], sent[slave_id])
            elif action < 0.6 and sessions:
                slave_id = rng.choice(list(sessions))
                ack = rng.randint(acked[slave_id] or 0, sent[slave_id])
                acked[slave_id] = ack
                results.update(tracker.on_slave_ack(slave_id, sessions[slave_id], ack, 0))
            elif action < 0.85:
                token = ("put", step)
                entry = (rng.randint(1, 400), rng.randint(0, 4), now + rng.uniform(0.1, 3))
                status = tracker.add_waiter(token, *entry)
                if status is not None:
                    results[token] = status
                else:
                    pending[token] = entry
            else:
                now += rng.uniform(0, 1)
                results.update(tracker.expire(now))
            for token, (next_offset, need, deadline) in list(pending.items()):
                holders = 1 + sum(1 for ack in acked.values() if ack is not None and ack >= next_offset)
                if token in results:
                    expected = OK if holders >= need else TIMEOUT
                    assert results[token] is expected or results[token] is TIMEOUT and deadline <= now
                    del pending[token]
                else:
                    assert holders < need and deadline > now


def test_quirk_fix_waiting_puts_are_replanned_when_a_slave_is_lost():
    """Decision 11: 3 replicas, inSync 3 with degradation. Slave 1 acked 100, slave 2 acked 150;
    puts end at 120, 200 and 300. Losing slave 2 lowers the need to 2: slave 1's copy releases
    the put at 120 now and the others when slave 1 reaches them; lowering to 1 releases the rest."""
    tracker, sessions = tracker_with_acks(100, 150)
    for token, end in (("a", 120), ("b", 200), ("c", 300)):
        assert tracker.add_waiter(token, end, 3, 9.0) is None
    assert tracker.detach(2, sessions[1])
    assert tracker.lower_need(3) == []  # nothing needs more than 3
    assert tracker.lower_need(2) == []  # slave 1 has only 100
    assert tracker.on_slave_ack(1, sessions[0], 200, 200) == [("a", OK), ("b", OK)]
    assert tracker.lower_need(1) == [("c", OK)]
    assert tracker.waiting == 0 and tracker.next_deadline() is None and tracker.expire(10.0) == []


def test_lowering_the_need_keeps_other_waiters_in_offset_order():
    tracker, sessions = tracker_with_acks(0, 0)
    assert tracker.add_waiter("needs 2", 50, 2, 9.0) is None
    assert tracker.add_waiter("needs 3", 40, 3, 9.0) is None
    tracker.lower_need(2)
    assert tracker.on_slave_ack(1, sessions[0], 45, 45) == [("needs 3", OK)]
    assert tracker.on_slave_ack(1, sessions[0], 50, 50) == [("needs 2", OK)]


def test_quirk_fix_waiting_puts_that_need_more_copies_than_can_be_given_end_at_once():
    """Decision 11 without degradation: 3 replicas, inSync 3; one slave is lost, so a put that
    needs 3 copies cannot get them: FLUSH_SLAVE_TIMEOUT now; a put that needs 2 keeps waiting."""
    tracker, sessions = tracker_with_acks(0, 0)
    assert tracker.add_waiter("needs 3", 10, 3, 9.0) is None
    assert tracker.add_waiter("needs 2", 20, 2, 9.0) is None
    assert tracker.fail_unreachable() == []  # two slaves attached: 3 copies are possible
    tracker.detach(2, sessions[1])
    assert tracker.fail_unreachable() == [("needs 3", TIMEOUT)]
    assert tracker.waiting == 1
    assert tracker.on_slave_ack(1, sessions[0], 20, 20) == [("needs 2", OK)]


@pytest.mark.parametrize("plan, in_sync, sync_state_set_size, met", [
    (AckPlan(1, False), 1, 1, True),  # nothing to wait for
    (AckPlan(2, False), 1, 1, False),  # inSyncReplicas=2, the slave not in sync yet
    (AckPlan(2, False), 2, 1, True),
    (AckPlan(3, True), 3, 1, False),  # refused by the pre-check whatever is in sync
    (AckPlan(ALL_ACK, False), 2, 3, False),  # a SyncStateSet member not in sync
    (AckPlan(ALL_ACK, False), 3, 3, True),
])
def test_a_plan_is_met_by_the_copies_in_sync(plan, in_sync, sync_state_set_size, met):
    assert plan.met_by(in_sync, sync_state_set_size) is met
