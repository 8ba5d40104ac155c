"""RIP-34 quorum writes with enableSlaveActingMaster on real processes (spec rocketmq-ha.md 1 and 4).

Goal: a SYNC_MASTER of a replica group started by `quorumq up --replicas N` with
enableSlaveActingMaster=true refuses a send up front (IN_SYNC_REPLICAS_NOT_ENOUGH, nothing appended)
when fewer copies are alive and in sync than it needs, degrades to fewer copies when
enableAutoInSyncReplicas allows it (never below minInSyncReplicas), counts any slave's ack toward
the quorum, treats a slave that lags by haMaxGapNotInSync or more as out of sync, takes its alive
count from the name server, never lets a send hang on a frozen slave, and with the master gone
lets consumers keep reading from the slave acting for it, read-only.

Method: the scenarios' faults are real: SIGKILL (the slave is gone; the master sees its replication
connection close at once), SIGSTOP (the slave is silent but its connection stays open until
haHousekeepingInterval), and the name server's expiry of brokers it stops hearing from. Sends go
through quorumq's producer, whose results carry RocketMQ's status names; what the user checks is
the status, whether the queue's max offset moved, and brokerStatus (aliveReplicas, inSyncReplicas,
slaves). The quorum keys are changed live between scenarios, so one cluster per group size serves
several tests: before each test the group is restored (slaves running and continued, the keys at
their baseline, every slave connected and in sync, the name server counting all of them).
"""

import signal
import time

import grpc
import pytest
from rocketmq import ClientConfiguration, Credentials, FilterExpression, SimpleConsumer

from harness import LocalCluster, check_for, frozen, start_process, stop_process, v5_message, v5_send
from quorumq.client import AdminClient, Blocking, ClientError, Message, Producer
from quorumq.cluster import cluster_pb2 as pb
from quorumq.cluster import cluster_pb2_grpc as pb_grpc
from replica_group import SETTLE_S, ReplicaGroup, new_topic

SEND_OK = "SEND_OK"
FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
NOT_ENOUGH = "IN_SYNC_REPLICAS_NOT_ENOUGH"

HOUSEKEEPING_MS = 4000  # haHousekeepingInterval: a silent replication peer is dropped after this
SLAVE_TIMEOUT_MS = 3000  # slaveTimeout, RocketMQ's default
SLACK_S = 10.0  # on top of every bound: the machine may be busy
EXPIRY_S = 30.0  # the name server drops a silent broker (3 s) and the master hears of it
GAP_DEFAULT = 268435456  # haMaxGapNotInSync, 256 MiB

# Every process of every cluster here: a SYNC_MASTER whose slaves may act for it, a name server that
# drops a broker 3 s after its last registration, brokers that register every second.
BASE_SETS = {
    "brokerRole": "SYNC_MASTER",
    "enableSlaveActingMaster": "true",
    "registerNameServerPeriod": "1000",
    "brokerNotActiveTimeoutMillis": "3000",
    "scanNotActiveBrokerInterval": "500",
    "syncBrokerMemberGroupPeriod": "500",
    "haSendHeartbeatInterval": "1000",
    "haHousekeepingInterval": str(HOUSEKEEPING_MS),
    # Small preallocated segments: eleven brokers of 1 GiB each would push the disk towards
    # diskSpaceWarningLevelRatio, and the brokers would refuse sends with DISK_FULL.
    "mappedFileSizeCommitLog": str(2 * 1024 * 1024),
    "maxMessageSize": str(256 * 1024),
}


def group_fixtures(name: str, replicas: int, baseline: dict[str, object]):
    """Fixtures `name`_cluster, a class-scoped replica group of `replicas` brokers, and `name`, the
    same group restored for one test."""

    @pytest.fixture(scope="class", name=f"{name}_cluster")
    def cluster_group(tmp_path_factory):
        sets = {**BASE_SETS, **{key: str(value).lower() for key, value in baseline.items()}}
        cluster = LocalCluster(tmp_path_factory.mktemp(f"{name}-cluster"), replicas=replicas, sets=sets)
        try:
            group = ReplicaGroup(cluster.start(), baseline)
            try:
                yield group
            finally:
                group.close()
        finally:
            cluster.stop()

    @pytest.fixture(name=name)
    def restored_group(request):
        group = request.getfixturevalue(f"{name}_cluster")
        group.restore(aliveReplicas=group.size)  # the name server counts the whole group
        try:
            yield group
        finally:
            group.continue_slaves()  # a failed test may leave one stopped

    return cluster_group, restored_group


def quorum_keys(in_sync: int, min_in_sync: int = 1, auto: bool = False) -> dict[str, object]:
    return {"inSyncReplicas": in_sync, "minInSyncReplicas": min_in_sync, "enableAutoInSyncReplicas": auto,
            "haMaxGapNotInSync": GAP_DEFAULT, "slaveTimeout": SLAVE_TIMEOUT_MS}


pair_cluster, pair = group_fixtures("pair", 2, quorum_keys(2))  # 2-2-1, auto off
trio_cluster, trio = group_fixtures("trio", 3, quorum_keys(2))  # 3-2-1, auto off
quad_cluster, quad = group_fixtures("quad", 4, quorum_keys(3))  # 4-3-1, auto off


class TestTwoReplicas:
    """totalReplicas=2, inSyncReplicas=2: every send needs the slave's copy unless degraded."""

    def test_scenario_4_slave_killed_without_degradation_refuses_and_appends_nothing(self, pair):
        topic = pair.new_topic()
        assert pair.send(topic)[0].status == SEND_OK
        pair.configure(slaveTimeout=20_000)  # a send that waited for the dead slave would take this long
        pair.kill(*pair.slaves)
        pair.wait_status(slaves="", inSyncReplicas=1)
        queue_end, log_end = pair.queue_max(topic), pair.log_end()
        for _ in range(3):
            result, took = pair.send(topic)
            assert (result.status, result.queue_offset) == (NOT_ENOUGH, -1), result
            assert took < SLACK_S, "the refusal waited for the dead slave"
        assert pair.queue_max(topic) == queue_end, "a refused send was appended"
        assert pair.log_end() == log_end

    def test_scenario_5_slave_killed_with_degradation_sends_on_the_master_alone(self, pair):
        pair.configure(enableAutoInSyncReplicas=True, minInSyncReplicas=1)
        topic = pair.new_topic()
        assert pair.send(topic)[0].status == SEND_OK
        pair.configure(slaveTimeout=20_000)
        pair.kill(*pair.slaves)
        pair.wait_status(slaves="", inSyncReplicas=1)
        queue_end = pair.queue_max(topic)
        for index in range(3):
            result, took = pair.send(topic)
            assert (result.status, result.queue_offset) == (SEND_OK, queue_end + index), result
            assert took < SLACK_S, "the degraded send waited for the dead slave"
        assert pair.queue_max(topic) == queue_end + 3

    def test_scenario_17_alive_replicas_follow_the_name_server(self, pair):
        cluster_name = pair.cluster["cluster"]
        assert pair.status()["aliveReplicas"] == "2"
        assert set(pair.admin.member_group(cluster_name, "broker-a").addresses) == {0, 1}
        pair.kill(*pair.slaves)
        pair.wait_status(EXPIRY_S, aliveReplicas=1)  # the name server expired it, the master asked
        assert set(pair.admin.member_group(cluster_name, "broker-a").addresses) == {0}
        start_process(pair.slaves[0])
        pair.wait_status(aliveReplicas=2, slaves="1")
        assert set(pair.admin.member_group(cluster_name, "broker-a").addresses) == {0, 1}

    def test_a_send_refused_for_too_few_in_sync_replicas_creates_no_topic(self, pair):
        """Admission comes before auto-creation (autoCreateTopicEnable is on): a send to a new topic
        that the master refuses up front leaves the topic on no broker and in no route."""
        pair.kill(*pair.slaves)
        pair.wait_status(slaves="", inSyncReplicas=1)
        refused, topics = new_topic(), pair.status()["topicCount"]
        response = v5_send(pair.master["address"], v5_message(refused, b"refused"))
        assert NOT_ENOUGH in response.status.message, response.status
        pair.configure(inSyncReplicas=1)  # the master alone is enough now: a send makes its topic
        pair.assert_no_topic_made(refused, topics)

    @pytest.mark.parametrize("auto", [True, False], ids=["auto", "no-auto"])
    def test_scenario_10_lagging_slave_is_out_of_sync(self, pair, auto):
        gap = 4096
        pair.configure(haMaxGapNotInSync=gap, enableAutoInSyncReplicas=auto, minInSyncReplicas=1)
        topic = pair.new_topic()
        assert pair.send(topic)[0].status == SEND_OK  # the slave acked everything so far
        # Short: the first send after the freeze waits for an ack that cannot come.
        pair.configure(slaveTimeout=300)
        [slave] = pair.slaves
        with frozen(slave):
            first, took = pair.send(topic, size=2 * gap)
            # The slave was in sync before this put, so it waited, and it is stored.
            assert first.status == FLUSH_SLAVE_TIMEOUT and first.queue_offset >= 0, first
            assert took < 0.3 + SLACK_S
            status = pair.status()
            # Still connected (well within haHousekeepingInterval), but further behind than the gap.
            assert (status["slaves"], status["inSyncReplicas"]) == ("1", "1"), status
            queue_end = pair.queue_max(topic)
            result, took = pair.send(topic, size=2 * gap)
            if auto:
                assert (result.status, result.queue_offset) == (SEND_OK, queue_end), result
                assert pair.queue_max(topic) == queue_end + 1
            else:
                assert (result.status, result.queue_offset) == (NOT_ENOUGH, -1), result
                assert pair.queue_max(topic) == queue_end
            assert took < 0.3 + SLACK_S
        pair.configure(slaveTimeout=SLAVE_TIMEOUT_MS)
        pair.wait_status(inSyncReplicas=2, slaves="1")  # it caught up
        assert pair.send(topic)[0].status == SEND_OK

    @pytest.mark.parametrize("auto", [True, False], ids=["auto", "no-auto"])
    def test_feigned_death_never_hangs_a_send_and_the_slave_comes_back(self, pair, auto):
        """A SIGSTOPped slave keeps its connection but says nothing: sends time out or are refused
        but never hang; once the master drops the silent connection, sends no longer wait (they
        succeed with degradation on, are refused at once with it off); after SIGCONT the slave
        reconnects and sends need its copy again."""
        slave_timeout_ms = 2000
        pair.configure(enableAutoInSyncReplicas=auto, minInSyncReplicas=1, slaveTimeout=slave_timeout_ms)
        topic = pair.new_topic()
        assert pair.send(topic)[0].status == SEND_OK
        allowed = {SEND_OK, FLUSH_SLAVE_TIMEOUT} if auto else {FLUSH_SLAVE_TIMEOUT, NOT_ENOUGH}
        bound = slave_timeout_ms / 1000 + SLACK_S
        [slave] = pair.slaves
        with frozen(slave):
            deadline = time.monotonic() + HOUSEKEEPING_MS / 1000 + bound + 30
            seen = []
            while pair.status()["slaves"] != "":  # until the master drops the silent connection
                result, took = pair.send(topic)
                assert took < bound, f"a send hung for {took:.1f} s"
                assert result.status in allowed, result
                seen.append(result.status)
                assert time.monotonic() < deadline, f"the silent slave was never dropped; sends: {seen}"
                time.sleep(0.1)
            assert pair.status()["inSyncReplicas"] == "1"
            queue_end = pair.queue_max(topic)
            for index in range(3):
                result, took = pair.send(topic)
                assert took < bound, f"a send hung for {took:.1f} s"
                if auto:
                    assert (result.status, result.queue_offset) == (SEND_OK, queue_end + index), result
                else:
                    assert (result.status, result.queue_offset) == (NOT_ENOUGH, -1), result
        pair.wait_status(slaves="1", inSyncReplicas=2, aliveReplicas=2)
        result, _ = pair.send(topic)
        assert result.status == SEND_OK, result
        assert pair.log_end(slave) >= pair.log_end(), "SEND_OK before the slave held the message"


class TestThreeReplicas:
    """totalReplicas=3, inSyncReplicas=2."""

    def test_scenario_6_both_slaves_gone_degrades_then_refuses_once_degradation_is_off(self, trio):
        trio.configure(enableAutoInSyncReplicas=True, minInSyncReplicas=1)  # 3-2-1, auto
        topic = trio.new_topic()
        assert trio.send(topic)[0].status == SEND_OK
        trio.kill(*trio.slaves)
        trio.wait_status(EXPIRY_S, slaves="", inSyncReplicas=1, aliveReplicas=1)
        queue_end = trio.queue_max(topic)
        result, took = trio.send(topic)
        assert (result.status, result.queue_offset) == (SEND_OK, queue_end), result
        assert took < SLAVE_TIMEOUT_MS / 1000 + SLACK_S

        trio.configure(enableAutoInSyncReplicas=False)
        result, _ = trio.send(topic)
        assert (result.status, result.queue_offset) == (NOT_ENOUGH, -1), result
        assert trio.queue_max(topic) == queue_end + 1

    def test_scenario_7_one_slave_down_the_other_slaves_ack_suffices(self, trio):
        topic = trio.new_topic()
        assert trio.send(topic)[0].status == SEND_OK
        lost, kept = trio.slaves
        trio.kill(lost)
        trio.wait_status(EXPIRY_S, slaves=trio.slave_ids(kept), inSyncReplicas=2, aliveReplicas=2)
        queue_end = trio.queue_max(topic)
        for index in range(3):
            result, _ = trio.send(topic)
            assert (result.status, result.queue_offset) == (SEND_OK, queue_end + index), result
            assert trio.log_end(kept) >= trio.log_end(), "SEND_OK before the remaining slave held it"

    def test_scenario_9_floor_of_two_refuses_with_both_slaves_down(self, trio):
        trio.configure(enableAutoInSyncReplicas=True, minInSyncReplicas=2)  # 3-2-2, auto
        topic = trio.new_topic()
        first, second = trio.slaves
        trio.kill(first)
        trio.wait_status(slaves=trio.slave_ids(second))
        assert trio.send(topic)[0].status == SEND_OK  # need 2, the master and the other slave
        trio.kill(second)
        trio.wait_status(slaves="", inSyncReplicas=1)
        queue_end = trio.queue_max(topic)
        for _ in range(3):
            result, took = trio.send(topic)
            assert (result.status, result.queue_offset) == (NOT_ENOUGH, -1), result
            assert took < SLAVE_TIMEOUT_MS / 1000 + SLACK_S
        assert trio.queue_max(topic) == queue_end


class TestFourReplicas:
    """totalReplicas=4, inSyncReplicas=3: any two slaves' acks make the quorum."""

    def test_scenario_8_any_two_of_three_slaves_make_the_quorum(self, quad):
        topic = quad.new_topic()
        for frozen_slave in quad.slaves:
            others = [slave for slave in quad.slaves if slave is not frozen_slave]
            with frozen(frozen_slave):
                queue_end = quad.queue_max(topic)
                result, _ = quad.send(topic)
                assert (result.status, result.queue_offset) == (SEND_OK, queue_end), \
                    f"slave {frozen_slave['broker_id']} frozen: {result}"
                end = quad.log_end()
                assert all(quad.log_end(slave) >= end for slave in others), "SEND_OK before two slaves held it"
            # Continued within haHousekeepingInterval: its connection held; it catches up.
            quad.wait_status(inSyncReplicas=4, slaves=quad.slave_ids(*quad.slaves))
            quad.wait_caught_up(frozen_slave)


# The master gone: consumers read on from the slave acting for it.

def configuration(cluster: dict) -> ClientConfiguration:
    return ClientConfiguration(cluster["access_point"], Credentials(), request_timeout=5)


def receive(consumer: SimpleConsumer, count: int, timeout_s: float = 30.0) -> list:
    """Exactly `count` messages (fewer only at the deadline), never more: each call asks for the rest."""
    received = []
    deadline = time.monotonic() + timeout_s
    while len(received) < count and time.monotonic() < deadline:
        received.extend(consumer.receive(count - len(received), 60))
    return received


def broker_progress(address: str, group: str, topic: str) -> pb.ConsumerProgress:
    """One broker's view of a group (a slave included), as `admin consumerProgress -b` would show."""
    with grpc.insecure_channel(address) as channel:
        return pb_grpc.BrokerAdminStub(channel).GetConsumerProgress(pb.GroupRequest(group=group, topic=topic),
                                                                   timeout=5)


def test_consumers_keep_reading_from_the_acting_slave_when_the_master_is_gone(start_cluster):
    cluster = start_cluster(replicas=2, sets={**BASE_SETS, "inSyncReplicas": "2"})
    brokers = {p["broker_id"]: p for p in cluster["processes"] if p["kind"] == "broker"}
    master, slave = brokers[0], brokers[1]
    topic, group = new_topic(), "GActing"
    bodies = [f"m{index}".encode() for index in range(30)]
    with Blocking(AdminClient, cluster["access_point"], timeout_s=5.0) as admin:
        # Until its slave connects, a master needing two copies refuses sends.
        check_for(SETTLE_S, 0.1, lambda: admin.broker_status(master["address"])["inSyncReplicas"] == "2",
                  "the slave connected")
        admin.update_topic(master["address"], topic, read_queue_nums=1, write_queue_nums=1)
        config = configuration(cluster)
        consumer = SimpleConsumer(config, group, {topic: FilterExpression("*")}, await_duration=1)
        consumer.startup()
        try:
            # The group's first receive, before the sends, fixes its start: offset 0 of the empty queue.
            assert consumer.receive(1, 60) == []
            with Blocking(Producer, cluster["access_point"]) as producer:
                results = producer.send_batch(topic, [Message(body) for body in bodies], queue_id=0)
            assert [r.status for r in results] == [SEND_OK] * 30  # each one on the slave too
            early = receive(consumer, 10)
            assert sorted(m.body for m in early) == sorted(bodies[:10])
            for message in early:
                consumer.ack(message)
            # The slave copies the master's consumer positions every 3 s.
            check_for(SETTLE_S, 0.2, lambda: broker_progress(slave["address"], group, topic).queues[0]
                      .consumer_offset == 10, "the slave copied the group's position")
            late = receive(consumer, 5)  # acked just before the kill: the slave may not know yet
            assert sorted(m.body for m in late) == sorted(bodies[10:15])
            for message in late:
                consumer.ack(message)
        finally:
            consumer.shutdown()
        stop_process(master, signal.SIGKILL)

        def acting_route() -> pb.TopicRoute | None:
            route = admin.route(topic)
            return route if [b.serving_id for b in route.brokers] == [1] else None

        route = check_for(EXPIRY_S, 0.2, acting_route, "the name server routes the topic to the slave")
        # The slave copied the master's topic config (one queue, not the default eight) and serves
        # it read-only.
        [queue] = route.queues
        assert (queue.read_queue_nums, queue.write_queue_nums, queue.perm) == (1, 1, 4), queue
        assert 0 not in route.brokers[0].addresses

        consumer = SimpleConsumer(config, group, {topic: FilterExpression("*")}, await_duration=1)
        consumer.startup()
        try:
            rest = bodies[15:]
            received = []
            deadline = time.monotonic() + 30
            while not set(rest) <= {m.body for m in received} and time.monotonic() < deadline:
                received.extend(consumer.receive(32, 60))
            got = [m.body for m in received]
            assert set(rest) <= set(got), "the acting slave did not deliver what was never acked"
            assert not set(got) & set(bodies[:10]), "the slave forgot a position copied before the kill"
            assert set(got) <= set(bodies[10:]) and len(got) == len(set(got))
            for message in received:
                consumer.ack(message)
            assert consumer.receive(32, 60) == [], "acks on the acting slave did not hold"
        finally:
            consumer.shutdown()

    with Blocking(Producer, cluster["access_point"]) as producer:
        with pytest.raises(ClientError) as refused:
            producer.send(topic, Message(b"late"))
        assert refused.value.name == "NO_PERMISSION", refused.value
        result = producer.send(topic, Message(b"late"), queue_id=0)  # straight at the acting slave
        assert (result.status, result.queue_offset) == ("SERVICE_NOT_AVAILABLE", -1), result
