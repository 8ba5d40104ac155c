"""Scenario 24 and RocketMQ #10013 on real processes: a controller-mode group of three whose third
broker runs with asyncLearner=true. The learner copies every acknowledged send but never joins
the SyncStateSet, and when the master dies the controllers elect the other slave, never the
learner, which then follows the new master."""

import signal
import time
import uuid

import pytest

from controller_group import FAILOVER_S, SEND_OK, SETS, SETTLE_S, started_group
from harness import check_for, stop_process

LEARNER = 2  # the broker counted from 0 in `quorumq up`


@pytest.fixture(scope="module")
def group(tmp_path_factory):
    with started_group(tmp_path_factory.mktemp("learner"), controllers=1,
                       broker_sets=[f"{LEARNER}:asyncLearner=true"]) as group:
        yield group


def test_a_learner_copies_everything_never_joins_and_is_never_elected(group):
    learner = group.brokers[LEARNER]
    others = [broker for broker in group.brokers if broker is not learner]

    def sync_state_set() -> set[str]:
        info = group.replica_info()
        return {info["brokers"][str(member)] for member in info["sync_state_set"]}

    check_for(SETTLE_S, 0.2, lambda: sync_state_set() == {b["address"] for b in others}, "the other two in sync")
    master = group.master()
    assert master is not learner
    topic = group.new_topic()
    acknowledged = [body for body in (uuid.uuid4().bytes for _ in range(50)) if group.send(topic, body) == SEND_OK]
    assert len(acknowledged) == 50
    group.wait_caught_up(learner)  # the learner holds every byte
    # Caught up for longer than a SyncStateSet check and the expansion poll: still outside.
    time.sleep(3 * float(SETS["checkSyncStateSetPeriod"]) / 1000)
    assert learner["address"] not in sync_state_set()

    stop_process(master, signal.SIGKILL)
    new_master = group.master(timeout=FAILOVER_S)
    assert new_master is not learner and new_master is not master
    check_for(FAILOVER_S, 0.05, lambda: group.send(topic, b"after") == SEND_OK, "a send on the new master")
    acknowledged.append(b"after")
    assert group.status(learner)["brokerRole"] == "SLAVE"
    group.wait_caught_up(learner, new_master)  # the learner follows the new master
    assert learner["address"] not in sync_state_set()
    assert set(acknowledged) <= set(group.bodies(topic))
