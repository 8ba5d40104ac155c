"""The controller's decisions (core/controller_state.py) against spec rocketmq-ha.md section 4,
scenarios 32 to 42, 46 to 49 and 51 to 54, each decision the module documents, and invariants
over random request sequences.

Method: pure calls. A broker set is built only through `decide` and `fold`, as the controller
process builds it; live data is a dict of LiveBroker entries and the clock is a number passed in.
Broker ids 1, 2, 3 stand for RocketMQ's test brokers (9000, 9001, 9002 in PR 5694's test).
"""

import json
import random

import pytest

from quorumq import limits
from quorumq.core import controller_state as cs
from quorumq.core.controller_state import Code, Trigger

NOW = 1_000_000
TIMEOUT_MS = 3000
SETTINGS = cs.ControllerSettings()
UNCLEAN = cs.ControllerSettings(enable_elect_unclean_master=True)
PREFERRED = cs.ControllerSettings(enable_preferred_master=True)


def address(broker_id: int) -> str:
    return f"10.0.0.{broker_id}:10911"


def live(broker_id: int, epoch: int = 0, offset: int = 0, priority: int = cs.PRIORITY_DEFAULT,
         heard_ms: int = NOW, timeout_ms: int = TIMEOUT_MS, async_learner: bool = False,
         store_damaged: bool = False) -> cs.LiveBroker:
    return cs.LiveBroker(broker_id, address(broker_id), heard_ms, timeout_ms, epoch, offset, offset, priority,
                         async_learner, store_damaged)


def alive(*entries) -> dict[int, cs.LiveBroker]:
    """Live data: LiveBroker entries, or plain ids for brokers with default reports."""
    entries = [entry if isinstance(entry, cs.LiveBroker) else live(entry) for entry in entries]
    return {entry.broker_id: entry for entry in entries}


def run(broker_set, request, live_data=None, settings=SETTINGS, now_ms=NOW):
    """Decide one request and fold its events; returns (reply, events, set after)."""
    reply, events = cs.decide(broker_set, live_data or {}, request, now_ms, settings)
    return reply, events, cs.fold(broker_set, events)


def registered(*ids: int) -> cs.BrokerSet:
    """A set whose brokers took `ids` in order, as brokers do: ask the next id, apply for it."""
    broker_set = None
    for broker_id in ids:
        reply, _, _ = run(broker_set, cs.GetNextBrokerId("C", "b"))
        assert reply.broker_id == broker_id
        apply_id = cs.ApplyBrokerId("C", "b", broker_id, f"{address(broker_id)};1", address(broker_id))
        reply, _, broker_set = run(broker_set, apply_id)
        assert reply.code is Code.SUCCESS
    return broker_set


def elected(master: int, *ids: int) -> cs.BrokerSet:
    """Registered `ids`, and `master` won the first election: epochs 1, SyncStateSet {master}."""
    reply, _, broker_set = run(registered(*ids), cs.ElectMaster("C", "b", master, Trigger.BROKER))
    assert reply.code is Code.SUCCESS
    return broker_set


def in_sync(master: int, *ids: int) -> cs.BrokerSet:
    """`elected`, then the master's report put every broker in the SyncStateSet (epoch 2)."""
    broker_set = elected(master, *ids)
    reply, _, broker_set = run(broker_set, alter_to(broker_set, *ids), alive(*ids))
    assert reply.code is Code.SUCCESS
    return broker_set


def alter_to(broker_set: cs.BrokerSet, *members: int) -> cs.AlterSyncStateSet:
    """The current master's report of a new SyncStateSet, with the current epochs."""
    return cs.AlterSyncStateSet("b", broker_set.master_id, broker_set.master_epoch, frozenset(members),
                                broker_set.sync_state_set_epoch)


def state(reply: cs.Reply) -> tuple:
    return reply.code, reply.master_id, reply.master_epoch, reply.sync_state_set, reply.sync_state_set_epoch


def controller_elect() -> cs.ElectMaster:
    return cs.ElectMaster("C", "b", -1, Trigger.CONTROLLER)


# Codes and settings.

def test_codes_are_rocketmqs_response_codes():
    assert Code.SUCCESS == 0
    assert [code.value for code in Code][1:] == list(range(2000, 2015))
    assert (Code.CONTROLLER_FENCED_MASTER_EPOCH, Code.CONTROLLER_NOT_LEADER,
            Code.CONTROLLER_MASTER_STILL_EXIST, Code.CONTROLLER_BROKER_ID_INVALID) == (2000, 2007, 2011, 2014)


def test_defaults_are_rocketmqs():
    assert SETTINGS == cs.ControllerSettings(enable_elect_unclean_master=False, enable_preferred_master=False)
    assert (cs.PREFERRED_PRIORITY, cs.PRIORITY_DEFAULT) == (0, 2**31 - 1)
    assert live(1).priority == cs.PRIORITY_DEFAULT


# Scenarios 32 to 35: registration, the first election, the master's report.

def test_scenario_32_ids_first_election_still_exist_and_alter():
    """Ids 1, 2, 3 in order; broker 1 elects first (epochs 1); 2 and 3 get MASTER_STILL_EXIST; the
    master's report {1,2,3} at ssEpoch 1 gives ssEpoch 2, three in sync, none out."""
    broker_set = registered(1, 2, 3)
    reply, events, broker_set = run(broker_set, cs.ElectMaster("C", "b", 1, Trigger.BROKER))
    assert state(reply) == (Code.SUCCESS, 1, 1, {1}, 1) and events == (cs.MasterElected(1),)
    assert reply.master_address == address(1)
    for other in (2, 3):
        reply, events, _ = run(broker_set, cs.ElectMaster("C", "b", other, Trigger.BROKER), alive(1, 2, 3))
        assert state(reply) == (Code.CONTROLLER_MASTER_STILL_EXIST, 1, 1, {1}, 1) and events == ()
    reply, events, broker_set = run(broker_set, alter_to(broker_set, 1, 2, 3), alive(1, 2, 3))
    assert state(reply) == (Code.SUCCESS, 1, 1, {1, 2, 3}, 2)
    assert events == (cs.SyncStateSetAltered(frozenset({1, 2, 3})),)
    info, _, _ = run(broker_set, cs.GetReplicaInfo("b"))
    assert (info.in_sync_ids, info.out_of_sync_ids) == ({1, 2, 3}, frozenset())


def test_scenario_33_register_names_the_live_master():
    """Brokers 1, 2 with master 1; broker 3 registers: master 1, SSS {1} at epoch 1, two brokers
    out of sync. With the master dead the reply names none, so broker 3 asks for an election."""
    broker_set = elected(1, 1, 2, 3)
    reply, events, _ = run(broker_set, cs.RegisterBroker("C", "b", 3, address(3)), alive(1))
    assert state(reply) == (Code.SUCCESS, 1, 1, {1}, 1) and events == ()
    assert reply.master_address == address(1) and reply.out_of_sync_ids == {2, 3}
    reply, _, _ = run(broker_set, cs.RegisterBroker("C", "b", 3, address(3)), alive(2, 3))
    assert state(reply) == (Code.SUCCESS, None, 1, {1}, 1) and reply.master_address == ""


def test_register_names_the_master_to_itself_before_its_first_heartbeat():
    """Decision 8: the registering broker is alive; told "no master" it would ask for an election
    at once and could lose its role to a slave before its first heartbeat lands."""
    broker_set = in_sync(1, 1, 2)
    reply, _, _ = run(broker_set, cs.RegisterBroker("C", "b", 1, address(1)), alive(2))
    assert state(reply) == (Code.SUCCESS, 1, 1, {1, 2}, 2)
    assert run(broker_set, cs.ElectMaster("C", "b", 1, Trigger.BROKER), alive(2))[0].master_id == 2


def test_register_with_a_new_address_updates_it():
    """Spec 2.4 and scenario 44: a broker back on a new address keeps its id; the set learns it."""
    broker_set = elected(1, 1, 2)
    reply, events, after = run(broker_set, cs.RegisterBroker("C", "b", 1, "10.9.9.9:1"), alive(1))
    assert events == (cs.BrokerAddressUpdated(1, "10.9.9.9:1"),)
    assert reply.master_address == "10.9.9.9:1" and after.brokers[1] == ("10.9.9.9:1", f"{address(1)};1")


def test_register_refuses_an_unknown_set_or_id():
    unknown = Code.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED
    assert run(None, cs.RegisterBroker("C", "b", 1, "a"))[0].code is unknown
    reply, events, _ = run(registered(1), cs.RegisterBroker("C", "b", 2, "a"))
    assert reply.code is unknown and events == ()


def test_scenario_34_the_only_live_member_triggers_and_wins():
    """After 32, only broker 3 is alive; it triggers: master 3, epoch 2, SSS {3}, ssEpoch 3."""
    broker_set = in_sync(1, 1, 2, 3)
    reply, events, _ = run(broker_set, cs.ElectMaster("C", "b", 3, Trigger.BROKER), alive(live(3, epoch=1)))
    assert state(reply) == (Code.SUCCESS, 3, 2, {3}, 3) and events == (cs.MasterElected(3),)
    assert reply.master_address == address(3)


def test_scenario_35_controller_trigger_with_the_master_alive_changes_nothing():
    broker_set = in_sync(1, 1, 2)
    reply, events, after = run(broker_set, controller_elect(), alive(1, 2))
    assert state(reply) == (Code.CONTROLLER_MASTER_STILL_EXIST, 1, 1, {1, 2}, 2)
    assert events == () and after == broker_set


# Scenarios 36 to 38: the ranking (decision 3).

@pytest.mark.parametrize("two, three, winner", [
    ((1, 2, cs.PRIORITY_DEFAULT), (0, 3, cs.PRIORITY_DEFAULT), 2),  # 36: the higher epoch wins
    ((1, 2, cs.PRIORITY_DEFAULT), (1, 3, cs.PRIORITY_DEFAULT), 3),  # 37: then the higher offset
    ((1, 3, 2), (1, 3, 1), 3),  # 38: then the lower priority number
    ((1, 3, 5), (1, 3, 5), 2),  # a full tie: the lowest broker id
    ((1, 2**33, 5), (1, 5, 0), 2),  # #10578: offsets 2**33 apart compare as integers
])
def test_scenarios_36_to_38_candidates_rank_by_epoch_offset_priority_then_id(two, three, winner):
    """The master (1) expired; 2 and 3 report (epoch, offset, priority); the best wins, epoch 2."""
    broker_set = in_sync(1, 1, 2, 3)
    candidates = alive(live(2, *two), live(3, *three), live(1, heard_ms=NOW - TIMEOUT_MS - 1))
    reply, _, _ = run(broker_set, controller_elect(), candidates)
    assert state(reply) == (Code.SUCCESS, winner, 2, {winner}, 3)


def test_a_tie_goes_to_the_lowest_id_whatever_the_order_of_the_live_data():
    broker_set = in_sync(1, 1, 2, 3, 4)
    for order in ([4, 3, 2], [2, 4, 3], [3, 2, 4]):
        reply, _, _ = run(broker_set, controller_elect(), alive(*[live(i, 1, 7, 3) for i in order]))
        assert reply.master_id == 2


# Scenario 39: designated election.

def test_scenario_39_designated_election():
    """Master 1 lost, 2 elected (epoch 2), 1 back in the set. Designating 1 while it is dead:
    ELECT_MASTER_FAILED. Designating the current master: MASTER_STILL_EXIST. Designating 1 alive
    and in the set while master 2 lives: master 1, epoch 3."""
    broker_set = in_sync(1, 1, 2, 3)
    _, _, broker_set = run(broker_set, controller_elect(), alive(live(2, offset=9), 3))
    assert (broker_set.master_id, broker_set.master_epoch) == (2, 2)
    _, _, broker_set = run(broker_set, alter_to(broker_set, 1, 2, 3), alive(1, 2, 3))
    reply, events, _ = run(broker_set, cs.ElectMaster("C", "b", 1, Trigger.ADMIN), alive(2, 3))
    assert reply.code is Code.CONTROLLER_ELECT_MASTER_FAILED and events == ()
    reply, events, _ = run(broker_set, cs.ElectMaster("C", "b", 2, Trigger.ADMIN), alive(1, 2, 3))
    assert state(reply) == (Code.CONTROLLER_MASTER_STILL_EXIST, 2, 2, {1, 2, 3}, 4) and events == ()
    reply, events, _ = run(broker_set, cs.ElectMaster("C", "b", 1, Trigger.ADMIN), alive(1, 2, 3))
    assert state(reply) == (Code.SUCCESS, 1, 3, {1}, 5) and events == (cs.MasterElected(1),)


def test_a_designated_broker_outside_the_set_wins_only_by_unclean_election_with_no_member_alive():
    """Decision 6: the unclean pass runs only once no SyncStateSet member lives; RocketMQ also runs
    it when the designated broker is outside the set, handing the role to a broker not in sync."""
    broker_set = elected(1, 1, 2)
    request = cs.ElectMaster("C", "b", 2, Trigger.ADMIN)
    assert run(broker_set, request, alive(1, 2))[0].code is Code.CONTROLLER_ELECT_MASTER_FAILED
    assert run(broker_set, request, alive(1, 2), UNCLEAN)[0].code is Code.CONTROLLER_ELECT_MASTER_FAILED
    assert run(broker_set, request, alive(2), UNCLEAN)[0].master_id == 2


# Scenarios 40 and 41: every SyncStateSet member lost.

def test_scenario_40_without_unclean_election_no_master_until_a_member_returns():
    """SSS {1}, master 1 dead: the controller records "not elected" (master none, epoch 2, SSS
    {1}); broker 2's election fails and changes nothing; broker 1 back wins, epoch 3."""
    broker_set = elected(1, 1, 2, 3)
    reply, events, broker_set = run(broker_set, controller_elect(), alive(2, 3))
    assert state(reply) == (Code.CONTROLLER_MASTER_NOT_AVAILABLE, None, 2, {1}, 1)
    assert events == (cs.MasterElected(None),)
    reply, events, after = run(broker_set, cs.ElectMaster("C", "b", 2, Trigger.BROKER), alive(2, 3))
    assert reply.code is Code.CONTROLLER_ELECT_MASTER_FAILED and events == () and after == broker_set
    reply, _, _ = run(broker_set, cs.ElectMaster("C", "b", 1, Trigger.BROKER), alive(1, 2, 3))
    assert state(reply) == (Code.SUCCESS, 1, 3, {1}, 2)


def test_not_elected_is_recorded_once_while_the_set_waits():
    """Decision 5: the leader's scan asks again and again; the epoch moves only once."""
    broker_set = elected(1, 1, 2)
    _, _, broker_set = run(broker_set, controller_elect(), alive(2))
    assert cs.inactive_master(broker_set, alive(2), NOW)
    reply, events, after = run(broker_set, controller_elect(), alive(2))
    assert state(reply) == (Code.CONTROLLER_MASTER_NOT_AVAILABLE, None, 2, {1}, 1)
    assert events == () and after == broker_set
    reply, _, _ = run(broker_set, controller_elect(), alive(1, 2))  # the scan finds member 1 back
    assert state(reply) == (Code.SUCCESS, 1, 3, {1}, 2)


def test_scenario_41_unclean_election_picks_the_best_live_broker():
    broker_set = elected(1, 1, 2, 3)
    data = alive(live(2, offset=5), live(3, offset=9))
    reply, _, after = run(broker_set, controller_elect(), data, UNCLEAN)
    assert state(reply) == (Code.SUCCESS, 3, 2, {3}, 2) and after.sync_state_set == {3}


def test_decision_13_an_async_learner_is_never_elected():
    """#10013: not by unclean election though it ranks best, not by an admin's designation, not
    as the first broker asking; RocketMQ's controller knows nothing of learners."""
    broker_set = elected(1, 1, 2, 3)
    data = alive(live(2, offset=5), live(3, offset=9, async_learner=True))
    reply, _, _ = run(broker_set, controller_elect(), data, UNCLEAN)
    assert state(reply) == (Code.SUCCESS, 2, 2, {2}, 2)
    reply, events, _ = run(broker_set, cs.ElectMaster("C", "b", 3, Trigger.ADMIN), data, UNCLEAN)
    assert reply.code is Code.CONTROLLER_ELECT_MASTER_FAILED and events == ()
    reply, events, _ = run(registered(1, 2), cs.ElectMaster("C", "b", 1, Trigger.BROKER),
                           alive(live(1, async_learner=True)))
    assert reply.code is Code.CONTROLLER_ELECT_MASTER_FAILED and events == ()


def test_decision_14_a_damaged_master_is_replaced_by_a_sound_member():
    """F10: the master reports a damaged store; the scan asks for an election, which passes the
    damaged broker over though it ranks best otherwise, and a preferred broker that is damaged
    is not handed the role."""
    broker_set = in_sync(1, 1, 2, 3)
    data = alive(live(1, epoch=1, offset=90, store_damaged=True), live(2, epoch=1, offset=70),
                 live(3, epoch=1, offset=80))
    assert cs.inactive_master(broker_set, data, NOW)
    reply, _, after = run(broker_set, controller_elect(), data)
    assert state(reply)[:2] == (Code.SUCCESS, 3)
    assert not cs.inactive_master(after, data, NOW)
    preferred = alive(live(1, epoch=1), live(2, epoch=1, priority=cs.PREFERRED_PRIORITY, store_damaged=True))
    assert cs.handover_target(in_sync(1, 1, 2), preferred, NOW, PREFERRED) is None


def test_decision_14_a_damaged_broker_wins_only_when_no_sound_one_is_alive():
    broker_set = in_sync(1, 1, 2, 3)
    sound_elsewhere = alive(live(1, store_damaged=True), live(2, store_damaged=True, offset=9), live(3, offset=1))
    assert not cs.inactive_master(in_sync(1, 1, 2), alive(live(1, store_damaged=True), live(3)), NOW)  # 3 is no member
    alone = alive(live(1, store_damaged=True), live(2, store_damaged=True, offset=9))
    assert not cs.inactive_master(broker_set, alone, NOW)  # no sound member to hand the role to
    reply, _, _ = run(broker_set, controller_elect(), alone)
    assert reply.code is Code.CONTROLLER_MASTER_STILL_EXIST
    lost_master = {2: sound_elsewhere[2], 3: sound_elsewhere[3]}
    reply, _, _ = run(broker_set, controller_elect(), lost_master)
    assert state(reply)[:2] == (Code.SUCCESS, 3)  # the sound one, though 2 holds more
    reply, _, _ = run(broker_set, controller_elect(), {2: sound_elsewhere[2]})
    assert state(reply)[:2] == (Code.SUCCESS, 2)  # a damaged one rather than none


# Scenarios 42 and 49: liveness with numbers.

def test_scenario_49_a_broker_is_active_up_to_its_timeout_inclusive():
    """Heard at t with a 3 s timeout: active at t + 3000, not at t + 3001, so the next 5 s scan
    after that expires it."""
    heard = live(2, heard_ms=NOW, timeout_ms=3000)
    assert heard.active(NOW) and heard.active(NOW + 3000) and not heard.active(NOW + 3001)


def test_scenario_42_heartbeat_driven_failover():
    """Unclean on, brokers 1 (master) and 2 with 3 s timeouts; only 2 keeps heartbeating. The
    master counts as lost 3001 ms after its last heartbeat; the controller's election elects 2."""
    broker_set = elected(1, 1, 2)
    last_of_1 = NOW
    for now_ms in (NOW + 1000, NOW + 3000, NOW + 3001, NOW + 6000):
        data = alive(live(1, heard_ms=last_of_1), live(2, epoch=1, heard_ms=now_ms))
        lost = now_ms > last_of_1 + TIMEOUT_MS
        assert cs.inactive_master(broker_set, data, now_ms) is lost
    reply, _, after = run(broker_set, controller_elect(), data, UNCLEAN, now_ms=NOW + 6000)
    assert state(reply) == (Code.SUCCESS, 2, 2, {2}, 2)
    assert not cs.inactive_master(after, data, NOW + 6000)


def test_inactive_master_needs_an_elected_set_and_a_live_broker():
    broker_set = in_sync(1, 1, 2)
    assert not cs.inactive_master(broker_set, {}, NOW)  # nobody alive: nobody to elect
    assert not cs.inactive_master(broker_set, alive(1, 2), NOW)
    assert not cs.inactive_master(registered(1, 2), alive(2), NOW)  # never elected: brokers elect first
    assert cs.inactive_master(broker_set, alive(2), NOW)


def test_a_stale_higher_offset_does_not_outlive_a_truncation():
    """Decision 4: the latest report wins, even with a lower offset than the previous one."""
    before = live(2, epoch=1, offset=900)
    after = cs.on_heartbeat(before, live(2, epoch=1, offset=500, heard_ms=NOW + 1000))
    assert (after.max_offset, after.last_heartbeat_ms) == (500, NOW + 1000)
    assert cs.on_heartbeat(None, before) == before


# Scenario 46: alterSyncStateSet's checks, in RocketMQ's order.

@pytest.mark.parametrize("master, master_epoch, members, set_epoch, code", [
    (1, 2, {1, 2}, 3, Code.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED),  # equal set, checked first
    (2, 2, {1}, 3, Code.CONTROLLER_INVALID_MASTER),
    (1, 1, {1}, 3, Code.CONTROLLER_FENCED_MASTER_EPOCH),
    (1, 3, {1}, 3, Code.CONTROLLER_FENCED_MASTER_EPOCH),  # an epoch from the future is no better
    (1, 2, {1}, 2, Code.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH),
    (1, 2, {1}, 4, Code.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH),
    (1, 2, {1, 9}, 3, Code.CONTROLLER_INVALID_REPLICAS),
    (1, 2, {1, 3}, 3, Code.CONTROLLER_BROKER_NOT_ALIVE),  # 3 is registered but dead
    (1, 2, {2}, 3, Code.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED),  # the set lacks the master
    (1, 2, set(), 3, Code.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED),
])
def test_scenario_46_alter_rejections(master, master_epoch, members, set_epoch, code):
    """Master 1 at epoch 2 (re-elected once), SSS {1, 2} at ssEpoch 3, broker 3 registered but
    dead: each wrong field gets its own code, and nothing changes."""
    broker_set = elected(1, 1, 2, 3)
    _, _, broker_set = run(broker_set, controller_elect(), alive(2))  # not elected: epoch 2
    _, _, broker_set = run(broker_set, cs.ElectMaster("C", "b", 1, Trigger.BROKER), alive(1, 2))
    _, _, broker_set = run(broker_set, alter_to(broker_set, 1, 2), alive(1, 2))
    assert (broker_set.master_epoch, broker_set.sync_state_set_epoch) == (3, 3)
    request = cs.AlterSyncStateSet("b", master, master_epoch + 1, frozenset(members), set_epoch)
    reply, events, after = run(broker_set, request, alive(1, 2))
    assert reply.code is code and events == () and after == broker_set


def test_alter_on_an_unknown_set_fails_and_a_set_without_master_refuses_every_master():
    request = cs.AlterSyncStateSet("b", 1, 1, frozenset({1}), 1)
    assert run(None, request)[0].code is Code.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED
    broker_set = elected(1, 1, 2)
    _, _, broker_set = run(broker_set, controller_elect(), alive(2))
    reply, _, _ = run(broker_set, cs.AlterSyncStateSet("b", 1, 2, frozenset({1, 2}), 1), alive(1, 2))
    assert reply.code is Code.CONTROLLER_INVALID_MASTER


# Scenario 47: applyBrokerId (decision 9).

def test_scenario_47_apply_broker_id():
    """An unknown set takes only id 1; an id held under another check code is refused; the same
    check code (a crashed broker's retry) succeeds without a change."""
    reply, events, _ = run(None, cs.ApplyBrokerId("C", "b", 2, "c", "a"))
    assert reply.code is Code.CONTROLLER_BROKER_ID_INVALID and events == ()
    broker_set = registered(1)
    reply, events, _ = run(broker_set, cs.ApplyBrokerId("C", "b", 1, "other;2", "a"))
    assert reply.code is Code.CONTROLLER_BROKER_ID_INVALID and events == ()
    reply, events, after = run(broker_set, cs.ApplyBrokerId("C", "b", 1, f"{address(1)};1", address(1)))
    assert (reply.code, reply.broker_id, events, after) == (Code.SUCCESS, 1, (), broker_set)


def test_broker_ids_start_at_one_and_the_next_id_is_never_taken():
    broker_set = registered(1)
    reply, _, _ = run(broker_set, cs.ApplyBrokerId("C", "b", 0, "c", "a"))
    assert reply.code is Code.CONTROLLER_BROKER_ID_INVALID
    reply, _, broker_set = run(broker_set, cs.ApplyBrokerId("C", "b", 5, "c5", "a5"))
    assert reply.code is Code.SUCCESS and broker_set.next_id == 6
    assert run(broker_set, cs.GetNextBrokerId("C", "b"))[0].broker_id == 6
    assert run(None, cs.GetNextBrokerId("C", "b"))[0].broker_id == 1


def test_a_set_holds_at_most_brokers_per_set_max_ids():
    broker_set = registered(*range(1, limits.BROKERS_PER_SET_MAX + 1))
    reply, events, _ = run(broker_set, cs.ApplyBrokerId("C", "b", broker_set.next_id, "c", "a"))
    assert reply.code is Code.CONTROLLER_BROKER_ID_INVALID and events == ()


# Scenario 48: cleanBrokerData (decision 10).

def test_scenario_48_clean_broker_data():
    """Whole set with a master: refused. Ids still alive: refused. Dead ids: removed. An unknown
    set: refused."""
    broker_set = in_sync(1, 1, 2)
    invalid = Code.CONTROLLER_INVALID_CLEAN_BROKER_METADATA
    assert run(broker_set, cs.CleanBrokerData("C", "b"))[0].code is invalid
    assert run(broker_set, cs.CleanBrokerData("C", "b", frozenset({2})), alive(2))[0].code is invalid
    reply, events, after = run(broker_set, cs.CleanBrokerData("C", "b", frozenset({2})), alive(1))
    assert reply.code is Code.SUCCESS and events == (cs.BrokerDataCleaned(frozenset({2})),)
    assert (set(after.brokers), after.sync_state_set, after.master_id) == ({1}, {1}, 1)
    assert after.sync_state_set_epoch == broker_set.sync_state_set_epoch + 1, "the master takes only a newer set"
    assert run(None, cs.CleanBrokerData("C", "b"))[0].code is invalid


def test_cleaning_the_whole_set_needs_no_master_and_no_live_broker():
    broker_set = registered(1, 2)  # never elected
    assert run(broker_set, cs.CleanBrokerData("C", "b"), alive(2))[0].code is \
        Code.CONTROLLER_INVALID_CLEAN_BROKER_METADATA
    reply, events, after = run(broker_set, cs.CleanBrokerData("C", "b"))
    assert reply.code is Code.SUCCESS and events == (cs.BrokerDataCleaned(None),) and after is None


def test_cleaning_the_masters_id_records_no_master_and_the_last_id_removes_the_set():
    broker_set = in_sync(1, 1, 2)
    reply, _, after = run(broker_set, cs.CleanBrokerData("C", "b", frozenset({1})), alive(2))
    assert state(reply) == (Code.SUCCESS, None, 2, {2}, 3) and set(after.brokers) == {2}  # both epochs move
    reply, _, gone = run(after, cs.CleanBrokerData("C", "b", frozenset({2})))
    assert reply.code is Code.SUCCESS and gone is None


def test_cleaning_unknown_ids_or_no_ids_is_refused():
    broker_set = in_sync(1, 1, 2)
    for ids in ({7}, {2, 7}, set()):
        reply, events, _ = run(broker_set, cs.CleanBrokerData("C", "b", frozenset(ids)))
        assert reply.code is Code.CONTROLLER_INVALID_CLEAN_BROKER_METADATA and events == ()


# Scenarios 51 to 54: the preferred master, in its safe form (decision 7).

def preferred_layout() -> tuple[cs.BrokerSet, dict[int, cs.LiveBroker]]:
    """PR 5694's test: 1 (9000) is master with priority 1, 2 (9001) has priority 0, 3 (9002)
    priority 2; the master's report puts all three in the SyncStateSet."""
    broker_set = elected(1, 1, 2, 3)
    data = alive(live(1, 1, 50, 1), live(2, 1, 50, cs.PREFERRED_PRIORITY), live(3, 1, 50, 2))
    reply, _, broker_set = run(broker_set, alter_to(broker_set, 1, 2, 3), data, PREFERRED)
    assert state(reply) == (Code.SUCCESS, 1, 1, {1, 2, 3}, 2)  # the alter itself moves no role
    return broker_set, data


def test_scenario_51_the_preferred_member_is_named_and_its_designated_election_succeeds():
    """After the master's report, `handover_target` names 2; once the master fenced and 2 holds
    every byte, the designated election of 2 gives master 2, epoch 2, SSS {2}."""
    broker_set, data = preferred_layout()
    assert cs.handover_target(broker_set, data, NOW, PREFERRED) == 2
    reply, events, after = run(broker_set, cs.ElectMaster("C", "b", 2, Trigger.ADMIN), data, PREFERRED)
    assert state(reply) == (Code.SUCCESS, 2, 2, {2}, 3) and events == (cs.MasterElected(2),)
    assert reply.master_address == address(2)
    assert cs.handover_target(after, data, NOW, PREFERRED) is None  # the preferred broker leads


def test_an_unchanged_report_is_refused_with_the_preferred_master_on():
    """PR 5694 skips this check so that a periodic report can re-trigger a transfer; here the
    master reports only changes, and the hand-over does not go through alterSyncStateSet."""
    broker_set, data = preferred_layout()
    reply, events, _ = run(broker_set, alter_to(broker_set, 1, 2, 3), data, PREFERRED)
    assert reply.code is Code.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED and events == ()


def test_scenario_52_the_preferred_broker_gets_its_role_back_after_catching_up():
    """Preferred 1 is master and dies; 2 wins on (epoch, offset). 1 returns as a slave and, once
    the master's report admits it to the set, it is named for the hand-over."""
    broker_set = in_sync(1, 1, 2, 3)
    data = alive(live(2, 1, 90, 5), live(3, 1, 80, 2))
    _, _, broker_set = run(broker_set, controller_elect(), data, PREFERRED)
    assert broker_set.master_id == 2
    data[1] = live(1, 2, 90, cs.PREFERRED_PRIORITY)
    assert cs.handover_target(broker_set, data, NOW, PREFERRED) is None  # not caught up yet
    _, _, broker_set = run(broker_set, alter_to(broker_set, 2, 1), data, PREFERRED)
    assert cs.handover_target(broker_set, data, NOW, PREFERRED) == 1


def test_scenario_53_no_hand_over_to_a_preferred_broker_behind_or_inactive():
    broker_set, data = preferred_layout()
    behind = elected(1, 1, 2, 3)  # 2 is not in the SyncStateSet
    assert cs.handover_target(behind, data, NOW, PREFERRED) is None
    silent = {**data, 2: live(2, 1, 50, cs.PREFERRED_PRIORITY, heard_ms=NOW - TIMEOUT_MS - 1)}
    assert cs.handover_target(broker_set, silent, NOW, PREFERRED) is None
    assert run(broker_set, cs.ElectMaster("C", "b", 2, Trigger.ADMIN), silent)[0].code is \
        Code.CONTROLLER_ELECT_MASTER_FAILED
    master_gone = {key: value for key, value in data.items() if key != 1}
    assert cs.handover_target(broker_set, master_gone, NOW, PREFERRED) is None


def test_scenario_54_without_enable_preferred_master_priority_only_breaks_ties():
    """enablePreferredMaster off: no hand-over is ever named; priority 0 wins only a tie on
    (epoch, offset); a designated election still works when the broker is alive and in the set."""
    broker_set, data = preferred_layout()
    assert cs.handover_target(broker_set, data, NOW, SETTINGS) is None
    lost = {2: live(2, 1, 40, 0), 3: live(3, 1, 50, 2)}
    assert run(broker_set, controller_elect(), lost)[0].master_id == 3
    lost[3] = live(3, 1, 40, 2)
    assert run(broker_set, controller_elect(), lost)[0].master_id == 2
    assert run(broker_set, cs.ElectMaster("C", "b", 2, Trigger.ADMIN), data)[0].master_id == 2


def test_no_hand_over_when_the_master_is_preferred_itself_and_the_lowest_preferred_id_wins():
    broker_set = in_sync(1, 1, 2, 3)
    both = alive(live(1, priority=5), live(2, priority=0), live(3, priority=0))
    assert cs.handover_target(broker_set, both, NOW, PREFERRED) == 2
    both[1] = live(1, priority=0)
    assert cs.handover_target(broker_set, both, NOW, PREFERRED) is None


# The first election (decision 2).

def test_the_first_election_elects_the_requester_without_a_liveness_check():
    reply, _, _ = run(registered(1, 2), cs.ElectMaster("C", "b", 2, Trigger.BROKER), {})
    assert state(reply) == (Code.SUCCESS, 2, 1, {2}, 1)


def test_a_first_election_naming_no_registered_broker_changes_nothing():
    broker_set = registered(1, 2)
    reply, events, _ = run(broker_set, controller_elect(), alive(1, 2))
    assert (reply.code, events) == (Code.CONTROLLER_MASTER_NOT_AVAILABLE, ())
    reply, events, _ = run(broker_set, cs.ElectMaster("C", "b", 7, Trigger.BROKER), alive(1, 2))
    assert (reply.code, events) == (Code.CONTROLLER_ELECT_MASTER_FAILED, ())


# Malformed requests and misuse (decision 11).

@pytest.mark.parametrize("broker_id, trigger", [
    (2, Trigger.CONTROLLER), (-1, Trigger.BROKER), (0, Trigger.BROKER),
    (-1, Trigger.ADMIN), (0, Trigger.ADMIN),
])
def test_elections_naming_the_wrong_broker_are_invalid_requests(broker_id, trigger):
    reply, events, _ = run(in_sync(1, 1, 2), cs.ElectMaster("C", "b", broker_id, trigger), alive(2))
    assert reply.code is Code.CONTROLLER_INVALID_REQUEST and events == ()


@pytest.mark.parametrize("text", ["", "x" * (cs.TEXT_LENGTH_MAX + 1)])
def test_empty_or_overlong_texts_are_invalid_requests(text):
    invalid = Code.CONTROLLER_INVALID_REQUEST
    assert run(None, cs.ApplyBrokerId("C", "b", 1, "code", text))[0].code is invalid
    assert run(None, cs.ApplyBrokerId("C", text, 1, "code", "a"))[0].code is invalid
    assert run(registered(1), cs.RegisterBroker("C", "b", 1, text))[0].code is invalid


def test_unknown_sets_answer_rocketmqs_codes():
    assert run(None, controller_elect())[0].code is Code.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED
    assert run(None, cs.GetReplicaInfo("b"))[0].code is Code.CONTROLLER_BROKER_METADATA_NOT_EXIST


def test_misuse_raises():
    with pytest.raises(TypeError):
        cs.decide(None, {}, object(), NOW, SETTINGS)
    with pytest.raises(ValueError):
        cs.decide(registered(1), {}, cs.GetReplicaInfo("other"), NOW, SETTINGS)
    with pytest.raises(TypeError):
        cs.apply(registered(1), object())


@pytest.mark.parametrize("event", [
    cs.MasterElected(9),  # not registered
    cs.SyncStateSetAltered(frozenset({2})),  # no master yet
    cs.BrokerDataCleaned(frozenset({9})),
    cs.BrokerIdApplied("C", "b", 1, "a", "c"),  # already taken
    cs.MasterElected(None),  # a set never elected records no "not elected"
])
def test_apply_asserts_its_invariants(event):
    with pytest.raises(AssertionError):
        cs.apply(registered(1, 2), event)


def test_a_broker_set_cannot_be_built_inconsistent():
    with pytest.raises(ValueError):
        cs.BrokerSet("C", "b", 3, {1: ("a", "c")}, master_id=1, master_epoch=1, sync_state_set=frozenset({2}),
                     sync_state_set_epoch=1)  # a member that is not registered
    with pytest.raises(ValueError):
        cs.BrokerSet("C", "b", 2, {1: ("a", "c")}, master_id=1, master_epoch=1, sync_state_set=frozenset())
    with pytest.raises(ValueError):
        cs.BrokerSet("C", "b", 1, {1: ("a", "c")})  # next_id must be above every id


# GetReplicaInfo and JSON (decision 12).

def test_get_replica_info_lists_every_broker_with_its_address():
    broker_set = elected(1, 1, 2, 3)
    reply, events, _ = run(broker_set, cs.GetReplicaInfo("b"))
    assert state(reply) == (Code.SUCCESS, 1, 1, {1}, 1) and events == ()
    assert dict(reply.brokers) == {1: address(1), 2: address(2), 3: address(3)}
    assert (reply.in_sync_ids, reply.out_of_sync_ids) == ({1}, {2, 3})


def test_json_round_trips_with_stable_sorted_bytes():
    _, _, broker_set = run(in_sync(1, 1, 2), cs.ApplyBrokerId("C", "b", 10, "c10", address(10)))
    data = broker_set.to_json()
    assert cs.BrokerSet.from_json(data) == broker_set and cs.BrokerSet.from_json(data).to_json() == data
    raw = json.loads(data)
    assert list(raw) == sorted(raw) and list(raw["brokers"]) == ["1", "10", "2"]  # json's sort_keys


def _node(**changes) -> bytes:
    raw = json.loads(in_sync(1, 1, 2).to_json())
    raw.update(changes)
    return json.dumps(raw).encode()


@pytest.mark.parametrize("data", [
    b"", b"\xff", b"[]", b"{}", b"null", b"[" * 100_000, b" " * (cs.JSON_BYTES_MAX + 1),
    _node(extra=1), _node(nextId=True), _node(nextId=3.0), _node(masterEpoch=-1), _node(masterId="1"),
    _node(syncStateSet=[1, 1, 2]), _node(syncStateSet=[1, 3]), _node(masterId=5),
    _node(brokers={"01": ["a", "c"]}), _node(brokers={"\u0661": ["a", "c"]}), _node(brokers={"1": ["a"]}),
    _node(brokers={"1": ["a", 5], "2": ["b", "c"]}), _node(brokers=[]), _node(cluster=None), _node(name=""),
    _node(masterEpoch=0),
])
def test_from_json_refuses_anything_malformed(data):
    with pytest.raises(ValueError):
        cs.BrokerSet.from_json(data)


def test_from_json_refuses_a_text_that_is_not_bytes():
    with pytest.raises(ValueError):
        cs.BrokerSet.from_json(in_sync(1, 1, 2).to_json().decode())


# Invariants over random request sequences.

IDS = range(1, 6)


class Simulation:
    """One broker set under random heartbeats, silences and requests, checked after each step."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.settings = cs.ControllerSettings(self.rng.random() < 0.3, self.rng.random() < 0.5)
        self.now_ms = NOW
        self.live: dict[int, cs.LiveBroker] = {}
        self.broker_set: cs.BrokerSet | None = None
        self.elections = self.alters = 0

    def heartbeats(self) -> None:
        """Time passes; each broker reports with probability 0.6 (the others fall silent)."""
        self.now_ms += self.rng.randrange(0, 2500)
        for broker_id in IDS:
            if self.rng.random() < 0.6:
                report = cs.LiveBroker(broker_id, address(broker_id), self.now_ms, TIMEOUT_MS,
                                       self.rng.randrange(4), self.rng.randrange(2**40), 0,
                                       self.rng.choice([0, 1, 2, cs.PRIORITY_DEFAULT]))
                self.live[broker_id] = cs.on_heartbeat(self.live.get(broker_id), report)

    def request(self):
        rng, current = self.rng, self.broker_set
        broker_id = rng.choice(IDS)
        kinds = [
            lambda: cs.ApplyBrokerId("C", "b", rng.choice([broker_id, current.next_id if current else 1]),
                                     f"{address(broker_id)};1", address(broker_id)),
            lambda: cs.RegisterBroker("C", "b", broker_id, rng.choice([address(broker_id), "moved:1"])),
            lambda: cs.ElectMaster("C", "b", broker_id, rng.choice([Trigger.BROKER, Trigger.ADMIN])),
            controller_elect,
            self.random_alter,
            lambda: cs.CleanBrokerData("C", "b", rng.choice([None, frozenset({broker_id})])),
            lambda: cs.GetReplicaInfo("b"),
        ]
        return rng.choices(kinds, weights=[3, 2, 3, 3, 6, 1, 1])[0]()

    def random_alter(self) -> cs.AlterSyncStateSet:
        """Mostly the current master's report with the current epochs; sometimes stale fields."""
        rng, current = self.rng, self.broker_set
        master = current.master_id if current and current.master_id else rng.choice(IDS)
        members = frozenset({master, *rng.sample(IDS, rng.randrange(0, 4))})
        master_epoch = current.master_epoch if current else 0
        set_epoch = current.sync_state_set_epoch if current else 0
        if rng.random() < 0.2:
            master_epoch, set_epoch = master_epoch - rng.randrange(2), set_epoch - rng.randrange(2)
        return cs.AlterSyncStateSet("b", master, master_epoch, members, set_epoch)

    def step(self) -> None:
        self.heartbeats()
        request = self.request()
        before = self.broker_set
        reply, events = cs.decide(before, self.live, request, self.now_ms, self.settings)
        assert cs.decide(before, self.live, request, self.now_ms, self.settings) == (reply, events)  # pure
        after = cs.fold(before, events)
        check_step(self, before, request, reply, events, after)
        self.broker_set = after


def check_step(sim: Simulation, before, request, reply: cs.Reply, events, after) -> None:
    assert reply.code in (Code.SUCCESS, Code.CONTROLLER_MASTER_NOT_AVAILABLE) or events == ()
    if after is not None:
        check_set(sim, after)
        check_reply_shows_the_state_after(request, reply, after)
    if before is not None and after is not None:
        assert after.master_epoch >= before.master_epoch  # epochs never go back
        assert after.sync_state_set_epoch >= before.sync_state_set_epoch
        assert after.next_id >= before.next_id
    for event in events:
        if isinstance(event, cs.MasterElected) and event.master_id is None:  # a live master is never fenced
            lost = sim.live.get(before.master_id)
            assert before.master_id is not None and (lost is None or not lost.active(sim.now_ms))
        if isinstance(event, cs.MasterElected) and event.master_id is not None:
            sim.elections += 1
            check_election(sim, before, request, event.master_id)
        if isinstance(event, cs.SyncStateSetAltered):
            sim.alters += 1
            assert all(sim.live[member].active(sim.now_ms) for member in event.members)


def check_set(sim: Simulation, broker_set: cs.BrokerSet) -> None:
    """The master is a registered SyncStateSet member; the JSON node round-trips; the scans agree."""
    if broker_set.master_id is not None:
        assert broker_set.master_id in broker_set.sync_state_set
    assert broker_set.sync_state_set <= broker_set.brokers.keys()
    assert cs.BrokerSet.from_json(broker_set.to_json()) == broker_set
    if cs.inactive_master(broker_set, sim.live, sim.now_ms):
        master = sim.live.get(broker_set.master_id)
        assert master is None or not master.active(sim.now_ms)
    target = cs.handover_target(broker_set, sim.live, sim.now_ms, sim.settings)
    if target is not None:
        assert sim.settings.enable_preferred_master and target in broker_set.sync_state_set
        assert target != broker_set.master_id and sim.live[target].active(sim.now_ms)
        assert sim.live[target].priority == cs.PREFERRED_PRIORITY


def check_reply_shows_the_state_after(request, reply: cs.Reply, broker_set: cs.BrokerSet) -> None:
    if reply.code is not Code.SUCCESS and reply.code is not Code.CONTROLLER_MASTER_NOT_AVAILABLE:
        return
    assert (reply.master_epoch, reply.sync_state_set, reply.sync_state_set_epoch) == \
        (broker_set.master_epoch, broker_set.sync_state_set, broker_set.sync_state_set_epoch)
    hidden = isinstance(request, cs.RegisterBroker) and reply.master_id is None
    assert reply.master_id == broker_set.master_id or hidden
    assert reply.master_address == broker_set.address(reply.master_id)


def check_election(sim: Simulation, before: cs.BrokerSet, request, winner: int) -> None:
    """After the first election, a winner is active, in the set unless unclean election is on,
    the designated broker for an admin election, and otherwise the best-ranked candidate."""
    if before.master_epoch == 0:
        assert winner == request.broker_id
        return
    assert sim.live[winner].active(sim.now_ms)
    active_members = [member for member in before.sync_state_set if sim.live.get(member)
                      and sim.live[member].active(sim.now_ms)]
    assert winner in active_members or (sim.settings.enable_elect_unclean_master and not active_members)
    if request.trigger is Trigger.ADMIN:
        assert winner == request.broker_id
    elif winner in active_members:
        best = min(active_members, key=lambda member: (-sim.live[member].epoch, -sim.live[member].max_offset,
                                                       sim.live[member].priority, member))
        assert winner == best


@pytest.mark.parametrize("seed", range(40))
def test_invariants_over_random_request_sequences(seed):
    """Epochs never go back; the master is always in its SyncStateSet; an election after the
    first picks an active, best-ranked candidate; replies show the state after their events;
    decide is pure; the JSON node round-trips. Reproduce a failure with its seed."""
    sim = Simulation(seed)
    for _ in range(300):
        sim.step()
    assert sim.elections > 0 and sim.alters > 0, "the sequence never reached an election or an alter"
