"""Controller mode on real processes (spec rocketmq-ha.md 2, 3 and scenarios 21, 25, 28, 29, 31, 32, 39, 43,
45, 52): `quorumq up --replicas 3 --controller --controllers 2` runs a name server, a real
ZooKeeper, two controllers and a broker group of three whose master the controllers elect.

Goal: acknowledged sends survive the master's SIGKILL (a new master of a newer epoch takes over,
the old one rejoins as a slave and truncates what it alone held), the controller leader's death
and ZooKeeper's pause change nothing for the data path, the admin commands do what mqadmin's do,
the preferred master gets the role back once it has caught up, and both quorumq's and the
official client keep sending across a failover without a restart.

Method: faults are real signals to real pids. Every send counted as acknowledged returned
SEND_OK with allAckInSyncStateSet=true (so every member of the SyncStateSet held it), and is
looked for, by its body, in a full read of the queue from the master at the end. What a user
looks at decides each outcome: brokerStatus (brokerRole, masterEpoch, syncStateSet), and the
admin commands' JSON. The group is restored before each test (every broker running and in the
SyncStateSet).
"""

import json
import os
import shutil
import signal
import threading
import time
import uuid
from pathlib import Path

import pytest
from rocketmq import ClientConfiguration, Credentials
from rocketmq import Message as V5Message
from rocketmq import Producer as V5Producer

from controller_group import FAILOVER_S, SEND_OK, SETS, SETTLE_S, Group, started_group
from harness import (
    check_for,
    cli,
    console_errors,
    free_base_port,
    headless_chromium,
    log_end,
    log_since,
    metric,
    official_message,
    page_text,
    pid_alive,
    receive_all,
    scrape,
    simple_consumer,
    start_process,
    started_producer,
    started_proxy,
    stop_process,
    v5_message,
    v5_send,
)
from quorumq.client import Blocking, ClientError, Message, Producer, PullConsumer, SendResult
from quorumq.client.errors import FanOutError
from quorumq.cluster import cluster_pb2 as pb
from quorumq.controller.service import NEW_LEADER_GRACE_S
from quorumq.core.subscription import CUSTOMIZED, RetryPolicy, SubscriptionGroup
from quorumq.limits import SLAVE_TIMEOUT_MS_DEFAULT
from quorumq.protocol.configs import group_from_pb, group_to_pb


@pytest.fixture(scope="module")
def group_cluster(tmp_path_factory):
    with started_group(tmp_path_factory.mktemp("controller"), controllers=2, dashboard=True) as group:
        yield group


@pytest.fixture
def group(group_cluster):
    group_cluster.restore()
    return group_cluster


def test_one_master_is_elected_and_every_replica_joins_the_sync_state_set(group):
    """Scenarios 32, 25: the first broker to ask is elected at epoch 1 or later, each broker gets a
    persistent id, the master's SyncStateSet grows as the slaves catch up, and the controller,
    the master's status and its epoch file agree."""
    info = group.wait_in_sync()
    master = group.master()
    status = group.status(master)
    assert sorted(map(int, info["brokers"])) == [1, 2, 3]
    assert int(status["brokerId"]) == info["master_id"] and int(status["masterEpoch"]) == info["master_epoch"] >= 1
    epochs = json.loads(cli("admin", "getBrokerEpoch", "-n", group.cluster["access_point"], "-b",
                            master["address"], "--json").stdout)
    assert epochs["epochs"][-1]["epoch"] == info["master_epoch"] and epochs["epochs"][-1]["end_offset"] == -1
    for slave in group.slaves():
        slave_status = group.status(slave)
        assert slave_status["brokerRole"] == "SLAVE" and slave_status["masterEpoch"] == str(info["master_epoch"])
    meta = group.admin_json("getControllerMetaData")
    assert meta["leader"] in group.controller_addresses.split(";") and len(meta["controllers"]) == 2


def test_quorumq_clients_take_each_queue_once_at_the_master(group):
    """The route lists each queue once per replica, for the official clients; quorumq's clients
    keep each queue once, at the master: a producer that took the slaves' entries too had most
    SendBatch requests refused and sent again after a backoff (40 ms a request instead of 1-2),
    and admin consumeMessage printed each message once per replica."""
    topic = group.new_topic()
    for index in range(3):
        assert group.send(topic, f"m{index}".encode()) == SEND_OK
    with Blocking(PullConsumer, group.cluster["access_point"], "reader") as consumer:
        assert [(queue.queue_id, queue.address) for queue in consumer.queues(topic)] == [(0, group.master()["address"])]
    printed = cli("admin", "consumeMessage", "-n", group.cluster["access_point"], "-t", topic, "--json")
    assert [record["body"] for record in json.loads(printed.stdout)] == ["m0", "m1", "m2"], printed.stderr


def test_master_sigkill_elects_a_slave_and_loses_no_acknowledged_send(group):
    """Scenario 43: sends acknowledged by the old master are all on the new master (epoch + 1),
    which takes sends and which cluster.json names at once; the old master restarts as its slave
    and catches up."""
    topic = group.new_topic()
    before = group.replica_info()
    acknowledged = [body for body in (f"before-{i}".encode() for i in range(50)) if group.send(topic, body) == SEND_OK]
    assert len(acknowledged) == 50
    old_master = group.master()
    assert group.routed_role(old_master) == "master"
    stop_process(old_master, signal.SIGKILL)
    new_master = group.master()
    assert new_master is not old_master
    check_for(2.0, 0.05, lambda: (group.routed_role(new_master), group.routed_role(old_master))
              == ("master", "slave"), "cluster.json naming the new master within 2 s of its election")
    check_for(FAILOVER_S, 0.05, lambda: group.send(topic, b"after-0") == SEND_OK, "a send on the new master")
    acknowledged.append(b"after-0")
    assert int(group.status(new_master)["masterEpoch"]) == before["master_epoch"] + 1
    [entry] = v5_send(new_master["address"], v5_message(topic, b"after-1")).entries
    assert entry.status.message == f"SEND_OK (master epoch {before['master_epoch'] + 1})"
    acknowledged.append(b"after-1")
    start_process(old_master)
    group.wait_in_sync()
    assert group.status(old_master)["brokerRole"] == "SLAVE"
    assert set(acknowledged) <= set(group.bodies(topic))
    group.wait_caught_up(old_master, new_master)


def test_a_v5_resend_to_the_new_master_is_answered_from_the_copy_the_old_one_stored(group):
    """Issue 18: the official client resends with the same message id when an answer is lost. A
    master elected after its predecessor's SIGKILL rebuilds its recent ids from its log, so the
    resend gets the stored copy's queue offset and the message is read back once."""
    topic = group.new_topic()
    message = v5_message(topic, b"once", message_id=uuid.uuid4().hex.upper())
    old_master = group.master()
    [first] = v5_send(old_master["address"], message).entries
    assert first.status.message.startswith(SEND_OK)
    stop_process(old_master, signal.SIGKILL)
    new_master = group.master()

    def resent():
        [entry] = v5_send(new_master["address"], message).entries
        return entry if entry.status.message.startswith(SEND_OK) else None
    again = check_for(FAILOVER_S, 0.05, resent, "the resend acknowledged by the new master")
    assert (again.message_id, again.offset) == (first.message_id, first.offset)
    assert group.bodies(topic) == [b"once"]


def test_a_send_batch_resent_to_the_new_master_is_answered_from_the_copy_the_old_one_stored(group):
    """Issue 18: the same for quorumq's producer, whose SendBatch request id is its first message's
    id: messages sent again with their ids after the master's SIGKILL keep their offsets."""
    topic = group.new_topic()
    batch = [Message(f"b{index}".encode(), message_id=uuid.uuid4().hex.upper()) for index in range(3)]
    first = group.producer.send_batch(topic, batch, queue_id=0)
    assert [(r.status, r.queue_offset) for r in first] == [(SEND_OK, 0), (SEND_OK, 1), (SEND_OK, 2)]
    stop_process(group.master(), signal.SIGKILL)

    def resent():
        results = group.producer.send_batch(topic, batch, queue_id=0)
        return results if all(r.status == SEND_OK for r in results) else None
    again = check_for(FAILOVER_S, 0.05, resent, "the resend acknowledged by the new master")
    assert [r.queue_offset for r in again] == [0, 1, 2]
    assert group.bodies(topic) == [b"b0", b"b1", b"b2"]


def leading_controller(group: Group) -> dict:
    leader = group.leader()
    return next(controller for controller in group.controllers if controller["address"] == leader)


def test_an_election_is_counted_with_its_cause_in_the_metrics(group):
    """The leading controller counts the election a master's SIGKILL causes (cause "controller":
    it found the master lost), RocketMQ's election_total counts a new master elected, the new
    master exports the newer epoch, and its quorum counts as degraded while the old master is
    out of the SyncStateSet."""
    controller = leading_controller(group)
    before = scrape(controller)
    assert metric(before, "role") == 1 and metric(before, "active_broker_num", broker_set="broker-a") == 3
    old_master = group.master()
    epoch = metric(scrape(old_master), "quorumq_master_epoch")
    stop_process(old_master, signal.SIGKILL)
    new_master = check_for(FAILOVER_S, 0.05, lambda: group.master() is not old_master and group.master())
    after = scrape(controller)
    assert metric(after, "quorumq_elections_total", broker_set="broker-a", cause="controller") == \
        metric(before, "quorumq_elections_total", broker_set="broker-a", cause="controller") + 1
    assert metric(after, "election_total", broker_set="broker-a", election_result="new_master_elected") == \
        metric(before, "election_total", broker_set="broker-a", election_result="new_master_elected") + 1
    assert metric(after, "request_latency_count", request_type="AlterSyncStateSet") >= 1
    on_new_master = scrape(new_master)
    assert metric(on_new_master, "quorumq_master_epoch") == epoch + 1
    assert metric(on_new_master, "quorumq_broker_role", role="master") == 1
    check_for(10, 0.2, lambda: metric(scrape(new_master), "quorumq_degraded_quorum_seconds_total") > 0,
              "the new master's quorum counted as degraded")


def test_the_dashboard_shows_the_new_master_after_the_old_ones_sigkill(group):
    """The page `quorumq up` starts, in a headless chromium: it names the master, its epoch and the
    leading controller, and after a SIGKILL of the master, the elected one with the newer epoch."""
    master_on_page = '[data-group="broker-a"] [data-role="master"]'
    old_master = group.master()
    epoch = group.status(old_master)["masterEpoch"]
    with headless_chromium() as browser:
        browser.get(group.cluster["dashboard"])
        check_for(SETTLE_S, 0.1, lambda: page_text(browser, master_on_page) == old_master["address"],
                  "the master named")
        assert page_text(browser, '[data-group="broker-a"] [data-role="epoch"]') == epoch
        assert page_text(browser, "#controller").startswith("leader 127.0.0.1:")
        stop_process(old_master, signal.SIGKILL)
        new_master = check_for(FAILOVER_S, 0.05, lambda: group.master() is not old_master and group.master())
        check_for(FAILOVER_S, 0.1, lambda: page_text(browser, master_on_page) == new_master["address"],
                  "the new master named")
        assert page_text(browser, '[data-group="broker-a"] [data-role="epoch"]') == str(int(epoch) + 1)
        assert console_errors(browser) == []


def test_an_acknowledged_commit_survives_the_masters_sigkill(group):
    """C6: with allAckInSyncStateSet a pull consumer's commit is answered once every member of the
    SyncStateSet has applied it, so the master's SIGKILL right after the answer does not move the
    group's position back (slaves used to copy positions every 3 s)."""
    topic = group.new_topic()
    for index in range(30):
        assert group.send(topic, f"c{index}".encode()) == SEND_OK
    consumer_group = f"G{uuid.uuid4().hex[:8]}"
    with Blocking(PullConsumer, group.cluster["access_point"], consumer_group) as consumer:
        for offset in (10, 20, 30):
            consumer.commit_offset(topic, 0, offset)
    master = group.master()
    stop_process(master, signal.SIGKILL)
    check_for(FAILOVER_S, 0.1, lambda: group.master() is not master, "a new master")
    with Blocking(PullConsumer, group.cluster["access_point"], consumer_group) as consumer:
        assert check_for(SETTLE_S, 0.2, lambda: consumer.get_offset(topic, 0), "the group's position") == 30


def test_a_slave_rejoins_only_once_it_holds_the_commits_answered_without_it(group):
    """C6 (core/sync_state.py decision 5): a commit answered while a slave was out of the
    SyncStateSet is not on that slave. Caught up on the log, it must not rejoin before it has
    applied the commit, or its election would move the group's position back. Here the slave
    cannot apply it (a directory stands where its offsets file goes): it stays out, however long
    its log has been caught up, until the file can be written; then it rejoins, and once elected
    it serves the commit."""
    topic = group.new_topic()
    for index in range(30):
        assert group.send(topic, f"r{index}".encode()) == SEND_OK
    consumer_group = f"G{uuid.uuid4().hex[:8]}"
    master = group.master()
    left, _ = group.slaves()
    left_id = int(group.status(left)["brokerId"])
    offsets_file = Path(left["data_dir"]) / "config" / "consumerOffset.json"
    with Blocking(PullConsumer, group.cluster["access_point"], consumer_group) as consumer:
        consumer.commit_offset(topic, 0, 10)
        os.kill(left["pid"], signal.SIGSTOP)
        try:
            check_for(SETTLE_S, 0.2, lambda: left_id not in group.replica_info()["sync_state_set"],
                      "the stopped slave out of the SyncStateSet")
            offsets_file.unlink()
            (offsets_file / "in-the-way").mkdir(parents=True)
            consumer.commit_offset(topic, 0, 20)
            os.kill(left["pid"], signal.SIGCONT)
            group.wait_caught_up(left, master)
            until = time.monotonic() + 6  # 60 rounds of the master's SyncStateSet upkeep
            while time.monotonic() < until:
                assert left_id not in group.replica_info()["sync_state_set"], "rejoined without the commit"
                time.sleep(0.2)
        finally:
            os.kill(left["pid"], signal.SIGCONT)
            shutil.rmtree(offsets_file, ignore_errors=True)
    group.wait_in_sync()
    group.leave_only(left)
    with Blocking(PullConsumer, group.cluster["access_point"], consumer_group) as consumer:
        assert check_for(SETTLE_S, 0.2, lambda: consumer.get_offset(topic, 0), "the group's position") == 20


def test_an_acknowledged_topic_update_survives_the_masters_sigkill(group):
    """W4: a topic made on the master alone (`updateTopic -c` writes to masters) is answered once
    every SyncStateSet member has applied it, so the master's SIGKILL right after the answer does
    not lose it (slaves used to copy topics every 3 s)."""
    master = group.master()
    topic = f"T{uuid.uuid4().hex[:10]}"
    group.admin.update_topic(master["address"], topic, read_queue_nums=2, write_queue_nums=2)
    stop_process(master, signal.SIGKILL)
    check_for(FAILOVER_S, 0.1, lambda: group.master() is not master, "a new master")
    topics = {config.name: config for config in group.admin.metadata(group.master()["address"]).topics}
    assert topic in topics and topics[topic].write_queue_nums == 2


def test_an_acknowledged_subscription_group_and_topic_type_survive_the_masters_sigkill(group):
    """Issue 20: a subscription group update and a topic's message type are answered once every
    SyncStateSet member has applied them, as a topic update is, so a new master has both."""
    master = group.master()
    topic, consumer_group = f"T{uuid.uuid4().hex[:10]}", f"G{uuid.uuid4().hex[:8]}"
    fifo = SubscriptionGroup(consumer_group, consume_message_orderly=True, retry_max_times=2,
                             retry_policy=RetryPolicy(CUSTOMIZED, next_ms=(1000, 2000)))
    group.admin.update_subscription_group([master["address"]], group_to_pb(fifo))
    group.admin.update_topic(master["address"], topic, read_queue_nums=2, write_queue_nums=2, message_type="FIFO")
    stop_process(master, signal.SIGKILL)
    check_for(FAILOVER_S, 0.1, lambda: group.master() is not master, "a new master")
    [(_, held)] = group.admin.subscription_groups(consumer_group)
    assert held.configured and group_from_pb(held) == fifo
    topics = {config.name: config for config in group.admin.metadata(group.master()["address"]).topics}
    assert topics[topic].message_type == pb.FIFO


def test_a_slave_away_while_a_topic_was_deleted_and_made_again_rejoins_and_serves_the_new_life(group):
    """Issue 18 item 2 (W4): a deletion is a record in the commit log. A slave stopped while its
    topic was deleted, made again and written to used to refuse the master's records (the new
    life restarts at queue offset 0 where its queue held the old one) until an operator removed
    consumequeue/<topic>. Continued, it drops the queues at the deletion record, rejoins the
    SyncStateSet by itself and, once elected, serves the new life only; a topic deleted for good
    meanwhile does not come back with it."""
    topic, gone = group.new_topic(), group.new_topic()
    for index in range(5):
        assert group.send(topic, f"old{index}".encode()) == SEND_OK
    assert group.send(gone, b"gone") == SEND_OK
    master = group.master()
    away, other = group.slaves()
    away_id = int(group.status(away)["brokerId"])
    os.kill(away["pid"], signal.SIGSTOP)
    try:
        check_for(SETTLE_S, 0.2, lambda: away_id not in group.replica_info()["sync_state_set"],
                  "the stopped slave out of the SyncStateSet")
        for deleted in (topic, gone):
            try:
                group.admin.delete_topic(deleted)
            except FanOutError as failed:  # the stopped slave, if still listed, does not answer
                assert failed.outcomes[master["address"]] is None
        for broker in (master, other):
            group.admin.update_topic(broker["address"], topic, read_queue_nums=1, write_queue_nums=1)
        new = [f"new{index}".encode() for index in range(3)]
        for body in new:
            assert group.send(topic, body) == SEND_OK
    finally:
        os.kill(away["pid"], signal.SIGCONT)
    group.wait_in_sync()

    def topics_of_away() -> set[str]:
        return {config.name for config in group.admin.metadata(away["address"]).topics}

    check_for(SETTLE_S, 0.2, lambda: gone not in topics_of_away(), "the deleted topic gone from the slave")
    group.leave_only(away)
    assert group.bodies(topic) == new
    assert topic in topics_of_away() and gone not in topics_of_away()


def test_a_deposed_master_truncates_what_only_it_held(group):
    """Scenario 21: sends the slaves never got (FLUSH_SLAVE_TIMEOUT: the slaves were stopped, and
    more was written than the sockets between them can hold) are cut from the old master when it
    rejoins under the new epoch; both logs end alike and every acknowledged send stays."""
    topic = group.new_topic()
    assert group.send(topic, b"replicated") == SEND_OK
    old_master = group.master()
    slaves = group.slaves()
    logged_before = log_end(old_master)
    group.admin.update_broker_config("slaveTimeout", "300", address=old_master["address"])
    big = [Message(os.urandom(200 * 1024)) for _ in range(70)]  # 14 MB a batch
    for slave in slaves:
        os.kill(slave["pid"], signal.SIGSTOP)
    try:
        statuses = {result.status for _ in range(3) for result in group.producer.send_batch(topic, big, queue_id=0)}
        written = int(group.status(old_master)["commitLogMaxOffset"])
    finally:
        stop_process(old_master, signal.SIGKILL)
        for slave in slaves:
            os.kill(slave["pid"], signal.SIGCONT)
    assert statuses == {"FLUSH_SLAVE_TIMEOUT"}
    new_master = group.master()
    elected_end = int(group.status(new_master)["commitLogMaxOffset"])
    assert elected_end < written, "the new master holds less than the old one wrote"
    assert group.send(topic, b"on-the-new-master") == SEND_OK
    start_process(old_master)
    group.wait_in_sync()
    group.wait_caught_up(old_master, new_master)
    assert "truncating" in log_since(old_master, logged_before)
    bodies = group.bodies(topic)
    assert bodies[0] == b"replicated" and bodies[-1] == b"on-the-new-master"


def test_consumers_read_only_what_every_member_of_the_sync_state_set_holds(group):
    """Scenario 31 on the master: with allAckInSyncStateSet a send the slaves did not get
    (FLUSH_SLAVE_TIMEOUT: they are stopped) is stored but no consumer reads it, since a failover
    could cut it; once the slaves hold it, it is read."""
    topic = group.new_topic()
    assert group.send(topic, b"held-by-all") == SEND_OK
    master, slaves = group.master(), group.slaves()
    group.admin.update_broker_config("slaveTimeout", "300", address=master["address"])
    for slave in slaves:
        os.kill(slave["pid"], signal.SIGSTOP)
    try:
        assert group.send(topic, b"on-the-master-only") == "FLUSH_SLAVE_TIMEOUT"
        assert group.bodies(topic) == [b"held-by-all"]
    finally:
        for slave in slaves:
            os.kill(slave["pid"], signal.SIGCONT)
        group.admin.update_broker_config("slaveTimeout", str(SLAVE_TIMEOUT_MS_DEFAULT), address=master["address"])
    check_for(SETTLE_S, 0.2, lambda: group.bodies(topic) == [b"held-by-all", b"on-the-master-only"],
              "the send read once the slaves hold it")


def test_a_slave_whose_log_is_corrupt_cuts_it_and_fetches_the_rest_again(group):
    """Found by the chaos suite (F9): a byte flipped in a record of a slave's log that its
    checkpoint says was fsync'd. Recovery keeps such a record and refuses to go past it; as a
    slave the broker cuts its log there and fetches the rest from the master again, so it rejoins
    the SyncStateSet and its log ends as the master's."""
    topic = group.new_topic()
    for index in range(20):
        assert group.send(topic, f"m{index}".encode()) == SEND_OK
    master, slave = group.master(), group.slaves()[0]
    checkpoint = Path(slave["data_dir"]) / "checkpoint"
    flushed = check_for(SETTLE_S, 0.2, lambda: json.loads(checkpoint.read_text())["flushed_offset"],
                        "a checkpoint with a flushed offset")
    stop_process(slave, signal.SIGKILL)
    logged_before = log_end(slave)
    segment = sorted((Path(slave["data_dir"]) / "commitlog").iterdir())[-1]
    with open(segment, "r+b") as log_file:  # a byte near the end of the last fsync'd record
        position = flushed - int(segment.name) - 20
        log_file.seek(position)
        flipped = bytes([log_file.read(1)[0] ^ 0xFF])
        log_file.seek(position)
        log_file.write(flipped)
    start_process(slave)
    group.wait_in_sync()
    assert group.send(topic, b"after") == SEND_OK
    group.wait_caught_up(slave, master)
    assert "corrupt at" in log_since(slave, logged_before)


def flip_bit(path: Path, position: int) -> None:
    with open(path, "r+b") as data:
        data.seek(position)
        flipped = bytes([data.read(1)[0] ^ 0x08])
        data.seek(position)
        data.write(flipped)


def test_a_bit_flipped_in_a_sealed_segment_at_rest_is_repaired_from_the_master(group):
    """F10: a slave stopped cleanly (its checkpoint vouches for its whole log) finds, when it
    starts again, a bit flipped in a sealed segment: every record is checked at open, so it cuts
    its log there and copies the rest from the master again; the segment ends byte-identical to
    the master's."""
    topic = group.new_topic()
    fill_segments(group, topic, 2)
    master, slave = group.master(), group.slaves()[0]
    stop_process(slave)
    logged_before = log_end(slave)
    sealed = sorted((Path(slave["data_dir"]) / "commitlog").iterdir())[-2]
    flip_bit(sealed, int(SETS["mappedFileSizeCommitLog"]) // 2)  # inside a 100 KiB body
    start_process(slave)
    group.wait_in_sync()
    assert group.send(topic, b"after") == SEND_OK
    check_for(SETTLE_S, 0.2, lambda: logs_match(group, slave, master), "the slave's log ends as the master's")
    assert "corrupt at" in log_since(slave, logged_before)
    assert sealed.read_bytes() == (Path(master["data_dir"]) / "commitlog" / sealed.name).read_bytes()


def test_a_master_that_finds_its_log_damaged_gives_the_role_to_a_sound_slave(group):
    """F10: a bit flips in a record of the running master's log; the read that meets it marks the
    store damaged, the master says so in its heartbeats and the controller elects a sound member
    of the SyncStateSet. The old master cuts its log at the damage as a slave and copies the rest
    back, and every acknowledged message is served whole."""
    topic = group.new_topic()
    bodies = [f"{topic}-{index:04d}".encode() for index in range(50)]
    for body in bodies:
        assert group.send(topic, body) == SEND_OK
    master = group.master()
    segment = next(path for path in sorted((Path(master["data_dir"]) / "commitlog").iterdir())
                   if bodies[10] in path.read_bytes())
    flip_bit(segment, segment.read_bytes().index(bodies[10]) + 3)
    try:
        served = group.bodies(topic)
    except ClientError as error:
        served = error.name
    assert served != bodies, "the damaged record was served"
    new_master = check_for(FAILOVER_S + SETTLE_S, 0.2, lambda: (m := group.master()) is not master and m,
                           "a new master")
    assert new_master is not master
    group.wait_in_sync()
    assert group.bodies(topic) == bodies
    check_for(SETTLE_S, 0.2, lambda: logs_match(group, master, new_master),
              "the old master's log ends as the new one's")


def lose_store(broker: dict) -> None:
    """SIGKILL a broker and delete its log, queues, checkpoint and epoch file, keeping its
    identity and configs: a replica whose disk was replaced."""
    stop_process(broker, signal.SIGKILL)
    store = Path(broker["data_dir"])
    for name in ("commitlog", "consumequeue"):
        shutil.rmtree(store / name, ignore_errors=True)
    for name in ("checkpoint", "epochFileCheckpoint", "epochFileCheckpoint.bak", "abort"):
        (store / name).unlink(missing_ok=True)


def fill_segments(group: Group, topic: str, segments: int) -> None:
    """Acknowledged sends that span `segments` more commit-log segments of the master."""
    segment_bytes = int(SETS["mappedFileSizeCommitLog"])
    batch = [Message(os.urandom(100 * 1024)) for _ in range(20)]
    for _ in range(segments * segment_bytes // (20 * 100 * 1024) + 1):
        assert {result.status for result in group.producer.send_batch(topic, batch, queue_id=0)} == {SEND_OK}


def logs_match(group: Group, slave: dict, master: dict) -> bool:
    ends = [int(group.status(broker)["commitLogMaxOffset"]) for broker in (slave, master)]
    return ends[0] == ends[1]


def test_an_empty_slave_with_sync_from_last_file_copies_only_the_last_segment(group):
    """Scenario 29: a slave whose store was lost comes back with syncFromLastFile=true: it copies
    the master's last segment only, rejoins the SyncStateSet, and its log ends as the master's."""
    topic = group.new_topic()
    fill_segments(group, topic, 2)
    master, slave = group.master(), group.slaves()[0]
    lose_store(slave)
    config = Path(slave["config"])
    original_config = config.read_text()
    config.write_text(original_config + "syncFromLastFile=true\n")
    try:
        start_process(slave)
        group.wait_in_sync()
        check_for(SETTLE_S, 0.2, lambda: logs_match(group, slave, master), "the slave's log ends as the master's")
        segment_bytes = int(SETS["mappedFileSizeCommitLog"])
        master_end = int(group.status(master)["commitLogMaxOffset"])
        assert int(group.status(slave)["commitLogMinOffset"]) == master_end - master_end % segment_bytes > 0
    finally:
        config.write_text(original_config)
    assert group.send(topic, b"after") == SEND_OK


def test_an_empty_slave_starts_where_the_masters_log_now_begins(group):
    """Scenario 28: the master deleted its oldest segments (retention); a slave whose store was
    lost copies from the master's first segment left, rather than being refused for ever."""
    topic = group.new_topic()
    fill_segments(group, topic, 2)
    master, slave = group.master(), group.slaves()[0]
    lose_store(slave)
    retention = {"fileReservedTime": "0", "deleteWhen": ";".join(map(str, range(24))), "cleanResourceInterval": "200"}
    defaults = {key: group.admin.broker_config(master["address"])[key] for key in retention}
    for key, value in retention.items():
        group.admin.update_broker_config(key, value, address=master["address"])
    try:
        check_for(SETTLE_S, 0.2, lambda: int(group.status(master)["commitLogMinOffset"]) > 0,
                  "the master deleted its oldest segments")
    finally:
        for key, value in defaults.items():
            group.admin.update_broker_config(key, value, address=master["address"])
    start_process(slave)
    group.wait_in_sync()
    check_for(SETTLE_S, 0.2, lambda: logs_match(group, slave, master), "the slave's log ends as the master's")
    assert int(group.status(slave)["commitLogMinOffset"]) == int(group.status(master)["commitLogMinOffset"]) > 0
    assert group.send(topic, b"after") == SEND_OK


def test_the_controller_leader_dies_and_the_other_serves_the_same_state(group):
    """Scenario 45: the surviving controller leads with the same master, epochs and SyncStateSet,
    sends go on, and a failover after that still works."""
    info = group.replica_info()
    leader_address = group.leader()
    leader = next(c for c in group.controllers if c["address"] == leader_address)
    topic = group.new_topic()
    stop_process(leader, signal.SIGKILL)
    check_for(FAILOVER_S, 0.2, lambda: group.leader() not in ("", leader_address),
              "another controller leads")
    after = group.replica_info()
    assert (after["master_id"], after["master_epoch"], after["sync_state_set"]) == \
        (info["master_id"], info["master_epoch"], info["sync_state_set"])
    assert group.send(topic, b"with-one-controller") == SEND_OK
    stop_process(group.master(), signal.SIGKILL)
    check_for(FAILOVER_S, 0.05, lambda: group.send(topic, b"after-failover") == SEND_OK, "a send after failover")
    assert group.replica_info()["master_epoch"] == info["master_epoch"] + 1


def test_a_frozen_controller_leader_is_left_and_the_other_elects(group):
    """A controller leader that freezes (SIGSTOP: its sockets stay open, as with a machine that
    hangs) loses ZooKeeper and the other leads. The brokers leave the frozen one within seconds
    of its freeze, as soon as its keepalive pings go unanswered while the other controller
    answers, even before the other leads (here ZooKeeper is paused meanwhile, so it cannot);
    issue 18: they used to stay until a call found another controller leading. Then they
    heartbeat to the new leader, which replaces a master that dies."""
    leader_address = group.leader()
    leader = next(c for c in group.controllers if c["address"] == leader_address)
    topic = group.new_topic()
    logged = {broker["log"]: log_end(broker) for broker in group.brokers}
    os.kill(leader["pid"], signal.SIGSTOP)
    os.kill(group.zookeeper["pid"], signal.SIGSTOP)
    try:
        try:
            check_for(6.0, 0.1, lambda: all(f"controller {leader_address} does not answer pings: moving"
                                            in log_since(broker, logged[broker["log"]]) for broker in group.brokers),
                      "every broker leaving the frozen leader")
        finally:
            os.kill(group.zookeeper["pid"], signal.SIGCONT)
        check_for(SETTLE_S, 0.2, lambda: group.leader() not in ("", leader_address), "another controller leads")
        master = group.master()
        stop_process(master, signal.SIGKILL)
        check_for(FAILOVER_S, 0.05, lambda: group.send(topic, b"after-failover") == SEND_OK, "a send after failover")
        assert group.master() is not master
    finally:
        os.kill(leader["pid"], signal.SIGCONT)


def test_a_frozen_master_is_replaced_well_before_the_heartbeat_timeout(group):
    """Issue 18: a master that freezes (SIGSTOP: its connections stay open) is found by the
    controller's unanswered keepalive ping, not by controllerHeartBeatTimeoutMills: with RocketMQ's
    10 s, a send is acknowledged by a new master of a newer epoch well within 10 s (it took 10 to
    15 s)."""
    topic = group.new_topic()
    for broker in group.brokers:  # the next heartbeat carries it to the controller
        group.admin.update_broker_config("controllerHeartBeatTimeoutMills", "10000", address=broker["address"])
    epoch = group.replica_info()["master_epoch"]
    master = group.master()
    # A send hung on the frozen master gives up after 1 s and goes to a fresh route.
    with Blocking(Producer, group.cluster["access_point"], timeout_s=1.0) as producer:
        def sent() -> SendResult | None:
            try:
                result = producer.send(topic, Message(b"frozen"), queue_id=0)
            except ClientError:
                return None
            return result if result.status == SEND_OK else None

        assert sent()
        os.kill(master["pid"], signal.SIGSTOP)
        frozen_at = time.monotonic()
        try:
            result = check_for(6.0, 0.05, sent, "a send acknowledged by a new master")
            assert time.monotonic() - frozen_at < 6.0
            assert result.master_epoch > epoch and group.master() is not master
        finally:
            os.kill(master["pid"], signal.SIGCONT)
            for broker in group.brokers:
                group.admin.update_broker_config("controllerHeartBeatTimeoutMills",
                                                 SETS["controllerHeartBeatTimeoutMills"], address=broker["address"])


def test_a_controller_that_knows_no_leader_passes_the_question_on(group, tmp_path):
    """Issue 18: getControllerMetaData given first a controller that knows no leader (its ZooKeeper
    is unreachable) asks the next one and names the leader; it used to take that controller's
    empty answer as the leader's."""
    port = free_base_port(2)  # the controller's and, with nothing listening, its ZooKeeper's
    config = tmp_path / "controller.conf"
    config.write_text(f"listenPort={port}\nzookeeperAddress=127.0.0.1:{port + 1}\nzookeeperRoot=/nowhere\n")
    lone = {"kind": "controller", "config": str(config), "log": str(tmp_path / "controller.log")}
    start_process(lone)
    try:
        lone_address = f"127.0.0.1:{port}"
        assert check_for(SETTLE_S, 0.2, lambda: cli("admin", "getControllerMetaData", "-a", lone_address, "--json")
                         .returncode == 0, "the lone controller answers")
        leader = group.leader()
        result = cli("admin", "getControllerMetaData", "-a", f"{lone_address};{group.controller_addresses}", "--json")
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["leader"] == leader != ""
    finally:
        stop_process(lone, signal.SIGKILL)


def test_zookeeper_paused_keeps_the_data_path_and_changes_no_role(group):
    """Scenario 45: without ZooKeeper no controller leads, so no role changes, but the master
    keeps taking sends and the slaves keep replicating. The controllers say ZooKeeper is gone in
    a line, not a traceback (found by the chaos suite, F5 and C10)."""
    topic = group.new_topic()
    master = group.master()
    epoch = group.status(master)["masterEpoch"]
    logged_before = {controller["log"]: log_end(controller) for controller in group.controllers}
    os.kill(group.zookeeper["pid"], signal.SIGSTOP)
    try:
        deadline = time.monotonic() + 4.0
        sent = 0
        while time.monotonic() < deadline:
            assert group.send(topic, f"zk-down-{sent}".encode()) == SEND_OK
            sent += 1
        assert group.status(master)["masterEpoch"] == epoch and group.master() is master
    finally:
        os.kill(group.zookeeper["pid"], signal.SIGCONT)
    check_for(SETTLE_S, 0.2, group.leader, "a leader again")
    # A new leader elects on its own only after its grace period and a scan: watch past both.
    deadline = time.monotonic() + NEW_LEADER_GRACE_S + 2 * float(SETS["scanNotActiveBrokerInterval"]) / 1000 + 1.0
    while time.monotonic() < deadline:
        assert group.send(topic, b"zk-back") == SEND_OK
        time.sleep(0.1)
    assert group.status(master)["masterEpoch"] == epoch and group.master() is master
    for controller in group.controllers:
        assert "Traceback" not in log_since(controller, logged_before[controller["log"]])


def test_admin_elects_a_designated_broker_and_refuses_what_mqadmin_refuses(group):
    """Scenarios 39, 48: electMaster of an in-sync slave moves the role (epoch + 1); of the master
    it answers CONTROLLER_MASTER_STILL_EXIST; cleanBrokerData of live brokers is refused."""
    info = group.wait_in_sync()
    target = next(int(broker_id) for broker_id in info["brokers"] if int(broker_id) != info["master_id"])
    elected = group.admin_json("electMaster", "-b", "broker-a", "-i", str(target))
    assert elected["master_id"] == target and elected["master_epoch"] == info["master_epoch"] + 1
    check_for(FAILOVER_S, 0.1, lambda: group.status(group.master())["brokerId"] == str(target), "the new master")
    again = cli("admin", "electMaster", "-a", group.controller_addresses, "-b", "broker-a", "-i", str(target))
    assert again.returncode == 1 and "CONTROLLER_MASTER_STILL_EXIST" in again.stderr
    clean = cli("admin", "cleanBrokerData", "-a", group.controller_addresses, "-b", "broker-a")
    assert clean.returncode == 1 and "CONTROLLER_INVALID_CLEAN_BROKER_METADATA" in clean.stderr


def test_the_preferred_broker_gets_the_role_back_once_caught_up(group):
    """Scenario 52 and seed 004: a slave marked preferred (brokerElectionPriority=0, set live) takes
    the role once enablePreferredMaster is on; killed, it loses the role; restarted with the
    priority in its config, it catches up and gets it back. No send acknowledged meanwhile is lost."""
    topic = group.new_topic()
    preferred = group.slaves()[0]
    preferred_id = group.status(preferred)["brokerId"]
    config = Path(preferred["config"])
    original_config = config.read_text()
    acknowledged = []

    def send_some(count: int) -> None:
        for _ in range(count):
            body = uuid.uuid4().bytes
            if group.send(topic, body) == SEND_OK:
                acknowledged.append(body)

    group.admin.update_broker_config("brokerElectionPriority", "0", address=preferred["address"])
    assert cli("admin", "updateControllerConfig", "-a", group.controller_addresses, "-k", "enablePreferredMaster",
               "-v", "true").returncode == 0
    try:
        check_for(SETTLE_S, 0.05, lambda: send_some(5) or group.status(preferred)["brokerRole"] != "SLAVE",
                  "the preferred broker is master")
        group.wait_in_sync()  # the other brokers are back in the SyncStateSet: electable when it dies
        stop_process(preferred, signal.SIGKILL)
        check_for(FAILOVER_S, 0.05, lambda: send_some(1) or group.master() is not preferred, "another master")
        send_some(20)
        config.write_text(original_config + "brokerElectionPriority=0\n")
        start_process(preferred)
        check_for(SETTLE_S, 0.05, lambda: send_some(5) or group.status(preferred)["brokerRole"] != "SLAVE",
                  "the preferred broker is master again")
        send_some(5)
        assert int(group.status(preferred)["brokerId"]) == int(preferred_id)
        assert group.master() is preferred
        assert acknowledged and set(acknowledged) <= set(group.bodies(topic))
        assert metric(scrape(leading_controller(group)), "quorumq_preferred_master_handback_seconds_count",
                      broker_set="broker-a") >= 1
    finally:
        config.write_text(original_config)
        cli("admin", "updateControllerConfig", "-a", group.controller_addresses, "-k", "enablePreferredMaster",
            "-v", "false")
        if pid_alive(preferred["pid"]):  # a restart forgets the live change anyway
            group.admin.update_broker_config("brokerElectionPriority", str(2**31 - 1), address=preferred["address"])


def test_the_official_client_follows_a_failover_without_a_restart(group):
    """The official client, given every replica as its endpoints, sends again within 10 s of the
    master's SIGKILL: its route lists the whole group and every replica forwards to the master."""
    topic = group.new_topic()
    endpoints = ";".join(broker["address"] for broker in group.brokers)
    producer = V5Producer(ClientConfiguration(endpoints, Credentials(), request_timeout=3), (topic,))
    producer.startup()
    try:
        message = V5Message()
        message.topic, message.body = topic, b"before"
        assert producer.send(message).message_id
        stop_process(group.master(), signal.SIGKILL)
        killed_at = time.monotonic()

        def sends() -> bool:
            message.body = b"after"
            try:
                return bool(producer.send(message).message_id)
            except Exception:  # noqa: BLE001 - the client raises its own exception types while the group fails over
                return False

        check_for(10.0, 0.1, sends, "the official client sends again")
        assert time.monotonic() - killed_at <= 10.0
        assert b"after" in group.bodies(topic)
    finally:
        producer.shutdown()


class SteadySender:
    """Sends unique bodies one after another from a thread and keeps those acknowledged SEND_OK."""

    def __init__(self, access_point: str, topic: str) -> None:
        self.topic = topic
        self.acknowledged: list[bytes] = []
        self.statuses: dict[str, int] = {}
        self._stop = threading.Event()
        self._producer = Blocking(Producer, access_point)
        self._thread = threading.Thread(target=self._run, name="steady-sender", daemon=True)

    def _run(self) -> None:
        sequence = 0
        while not self._stop.is_set():
            body = f"steady-{sequence}".encode()
            sequence += 1
            try:
                status = self._producer.send(self.topic, Message(body), queue_id=0).status
            except ClientError as error:
                status = error.name
            self.statuses[status] = self.statuses.get(status, 0) + 1
            if status == SEND_OK:
                self.acknowledged.append(body)

    def __enter__(self) -> "SteadySender":
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        self._thread.join(timeout=60)
        self._producer.close()


def test_twenty_master_faults_under_load_lose_no_acknowledged_send(group):
    """The issue's test: with allAckInSyncStateSet=true and unclean election off, the master is
    SIGKILLed or SIGSTOPped 20 times in a row under a steady acknowledged send load; every send
    acknowledged SEND_OK is readable from the final master."""
    topic = group.new_topic()
    epochs = []
    with SteadySender(group.cluster["access_point"], topic) as sender:
        for round_number in range(20):
            master = group.master()
            acknowledged_before = len(sender.acknowledged)
            check_for(FAILOVER_S, 0.05, lambda before=acknowledged_before: len(sender.acknowledged) > before,
                      f"sends acknowledged before fault {round_number} (so far {sender.statuses})")
            paused = round_number % 2 == 1
            if paused:
                os.kill(master["pid"], signal.SIGSTOP)
            else:
                stop_process(master, signal.SIGKILL)
            new_master = group.master(timeout=FAILOVER_S + 10)
            assert new_master is not master
            if paused:
                os.kill(master["pid"], signal.SIGCONT)  # it finds the newer epoch and follows
            else:
                start_process(master)
            group.wait_in_sync()
            epochs.append(int(group.status(new_master)["masterEpoch"]))
        final_count = len(sender.acknowledged)
        check_for(FAILOVER_S, 0.05, lambda: len(sender.acknowledged) > final_count, "sends after the last fault")
    assert epochs == sorted(set(epochs)), f"every fault started a newer epoch: {epochs}"
    stored = group.bodies(topic)
    lost = set(sender.acknowledged) - set(stored)
    assert not lost, f"{len(lost)} of {len(sender.acknowledged)} acknowledged sends lost ({sender.statuses})"
    assert len(sender.acknowledged) > 100


def test_a_master_killed_before_its_first_message_rejoins_as_a_slave(tmp_path):
    """Its log holds epoch 1 and no bytes, its successor's begins with epoch 2: the two share no
    epoch, but an empty log agrees with any master (it used to wait for an operator forever)."""
    with started_group(tmp_path, controllers=1) as fresh:
        fresh.wait_in_sync()
        master = fresh.master()
        stop_process(master, signal.SIGKILL)
        check_for(FAILOVER_S, 0.1, lambda: fresh.master() is not master, "a new master")
        start_process(master)
        fresh.wait_in_sync()
        assert fresh.status(master)["brokerRole"] == "SLAVE"


def test_the_official_client_through_a_proxy_keeps_sending_and_receiving_across_a_masters_sigkill(group, tmp_path):
    """Issue 24: behind a proxy the official client knows no broker; when the master dies, the
    proxy's calls reach the new master through a replica, and the client sends, receives and acks
    on without a restart."""
    topic = group.new_topic()
    with started_proxy(tmp_path / "proxy", group.cluster["access_point"]) as proxy:
        config = ClientConfiguration(proxy["address"], Credentials(), request_timeout=5)
        producer = started_producer(config)
        consumer = simple_consumer(config, "ProxyFailover", topic)
        try:
            assert consumer.receive(16, 30) == []  # the group's first receive fixes where it starts
            before = {producer.send(official_message(topic, f"before-{i}".encode())).message_id for i in range(5)}
            received = receive_all(consumer, len(before))
            assert {m.message_id for m in received} == before
            for message in received:
                consumer.ack(message)
            old_master = group.master()
            stop_process(old_master, signal.SIGKILL)
            assert group.master() is not old_master

            def sent_after() -> str | None:
                try:
                    return producer.send(official_message(topic, b"after-0")).message_id
                except Exception:  # the official client's failure while no master answers
                    return None

            after = {check_for(FAILOVER_S, 0.1, sent_after, "a send through the proxy to the new master")}
            after |= {producer.send(official_message(topic, f"after-{i}".encode())).message_id for i in range(1, 5)}
            received = receive_all(consumer, len(after))
            assert after <= {m.message_id for m in received}
            for message in received:
                consumer.ack(message)
        finally:
            consumer.shutdown()
            producer.shutdown()
