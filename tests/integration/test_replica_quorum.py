"""RIP-34 quorum write on real replica groups (`quorumq up --replicas N`), without
enableSlaveActingMaster: spec rocketmq-ha.md section 1 and scenarios 1, 2, 3, 16, 18 and 19.

A master's put waits for inSyncReplicas copies (its own included) only as a SYNC_MASTER; with a
slave missing it answers FLUSH_SLAVE_TIMEOUT after slaveTimeout and keeps the message. A slave
refuses sends. Every SEND_OK of a 2-replica SYNC_MASTER group with inSyncReplicas=2 survives the
master's death on the slave, byte for byte. A client's retry of a timed-out send (same message id)
is not stored twice.

Clusters are shared per module where a test leaves them as it found them: the `quorum_group`
fixture resumes or restarts the slave and restores the live config after every test, and waits
until the master counts the slave in sync again.
"""

import os
import random
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from pathlib import Path

import pytest
from rocketmq import ClientConfiguration, Credentials
from rocketmq import Message as OfficialMessage
from rocketmq import Producer as OfficialProducer
from rocketmq.grpc_protocol import definition_pb2 as v5

from harness import (
    LocalCluster,
    check_for,
    cli,
    resume,
    stop_process,
    v5_message,
    v5_send,
)
from quorumq import limits
from quorumq.client import (
    Blocking,
    ClientError,
    Message,
    Producer,
    PullConsumer,
)
from quorumq.clock import Clock
from quorumq.config import Config, Kind
from quorumq.core.properties import MESSAGE_ID
from quorumq.store import MessageStore
from replica_group import SETTLE_S, ReplicaGroup, new_topic

SLAVE_TIMEOUT_MS = 1000  # short, so a send without its copies ends soon
SEGMENT_BYTES = 8 * 1024 * 1024  # small segments: less disk, and the durability log spans two
# Brokers register every second rather than every 10 s: a broker that starts before its name
# server listens would otherwise wait 10 s to register (and a slave to find its master).
COMMON_SETTINGS = {"registerNameServerPeriod": "1000", "mappedFileSizeCommitLog": str(SEGMENT_BYTES)}
# Live keys the quorum_group tests change, and the values the fixture puts back.
QUORUM_LIVE = {"inSyncReplicas": "2", "slaveTimeout": str(SLAVE_TIMEOUT_MS), "syncFlushTimeout": "5000"}
# "Did not hang" bounds: a send that waits for slaveTimeout must end within this much more.
HANG_SLACK_S = 4.0


# Helpers.

def commit_log_bytes(data_dir: str, end: int) -> bytes:
    """The commit log's bytes [0, end), read from the segment files (fixed size, named by their
    start offset) as they lie on disk; the broker may be running."""
    segments = sorted((int(path.name), path) for path in (Path(data_dir) / "commitlog").iterdir()
                      if path.name.isdigit())
    chunks = []
    for start, path in segments:
        if start >= end:
            break
        assert start == sum(map(len, chunks)), f"segment {path} does not follow the previous one"
        with open(path, "rb") as segment:
            chunks.append(segment.read(min(SEGMENT_BYTES, end - start)))
    data = b"".join(chunks)
    assert len(data) == end, f"the commit log in {data_dir} ends at {len(data)}, before {end}"
    return data


def open_store(process: dict) -> MessageStore:
    """A stopped broker's store, opened (and recovered) as the broker would open it."""
    config = Config.load(Kind.BROKER, Path(process["config"]))
    store = MessageStore(Path(process["data_dir"]), segment_bytes=config["mappedFileSizeCommitLog"],
                         store_host=process["address"], clock=Clock())
    store.open()
    return store


def read_queue(consumer, topic: str, queue_id: int) -> list:
    messages, offset = [], 0
    while True:
        result = consumer.pull(topic, queue_id, offset, 32)
        if not result.messages:
            return messages
        messages.extend(result.messages)
        offset = result.next_offset


def read_topic(access_point: str, topic: str) -> list:
    """Every message of a topic, as a consumer reads it from the master (no offsets committed)."""
    with Blocking(PullConsumer, access_point, "QuorumChecker") as consumer:
        return [message for queue in consumer.queues(topic)
                for message in read_queue(consumer, topic, queue.queue_id)]


def timed(fn, *args, **kwargs):
    started = time.monotonic()
    result = fn(*args, **kwargs)
    return result, time.monotonic() - started


# Fixtures.

def stop_cluster(cluster: LocalCluster) -> None:
    for process in (cluster.info or {}).get("processes", []):
        resume(process)  # a stopped process would only die after `up`'s grace period
    cluster.stop()


@pytest.fixture(scope="module")
def quorum_cluster(tmp_path_factory):
    """broker-a: a SYNC_MASTER and one slave, totalReplicas=inSyncReplicas=2, SYNC_FLUSH, a short
    slaveTimeout. A stopped slave stays connected for a minute (haHousekeepingInterval): the pending
    bound's test fills the master's pending sends while it does."""
    cluster = LocalCluster(tmp_path_factory.mktemp("quorum"), replicas=2, sets={
        **COMMON_SETTINGS, **QUORUM_LIVE, "brokerRole": "SYNC_MASTER", "flushDiskType": "SYNC_FLUSH",
        "haHousekeepingInterval": "60000"})
    try:
        yield cluster.start()
    finally:
        stop_cluster(cluster)


@pytest.fixture
def quorum_group(quorum_cluster):
    """The shared group with its slave connected and in sync; put back that way after the test."""
    with closing(ReplicaGroup(quorum_cluster, QUORUM_LIVE, send_timeout_s=15.0)) as group:
        group.wait_in_sync()
        yield group
        group.restore()


@pytest.fixture(scope="module")
def role_cluster(tmp_path_factory):
    """Two groups of a master and a slave, with no quorum keys set but these:
    broker-a: SYNC_MASTER with RocketMQ's defaults (inSyncReplicas=1), slaveTimeout 10 s;
    broker-b: ASYNC_MASTER with inSyncReplicas=3."""
    cluster = LocalCluster(tmp_path_factory.mktemp("roles"), brokers=2, replicas=2, sets=COMMON_SETTINGS,
                           broker_sets=["0:brokerRole=SYNC_MASTER", "0:slaveTimeout=10000",
                                        "2:inSyncReplicas=3"])
    try:
        yield cluster.start()
    finally:
        stop_cluster(cluster)


# Scenario 1: the compatibility trap.

def test_sync_master_with_default_quorum_does_not_wait_for_a_stuck_slave(role_cluster):
    with closing(ReplicaGroup(role_cluster, broker_name="broker-a", send_timeout_s=30.0)) as g:
        master, slave, admin, producer = g.master, g.slave, g.admin, g.producer
        status = g.wait_in_sync()
        assert (status["brokerRole"], status["aliveReplicas"]) == ("SYNC_MASTER", "2")
        topic = new_topic()
        os.kill(slave["pid"], signal.SIGSTOP)
        try:
            # inSyncReplicas=1 needs only the master's copy: SEND_OK without waiting for the slave,
            # which is connected but frozen (slaveTimeout is 10 s; waiting would take that long).
            for index in range(3):
                result, elapsed = timed(producer.send, topic, Message(f"trap-{index}".encode()),
                                        broker_name="broker-a")
                assert result.status == "SEND_OK", result
                assert elapsed < 5.0, f"a send took {elapsed:.1f} s: it waited for the stopped slave"
            status = admin.broker_status(master["address"])
            assert status["slaves"] == "1" and status["waitingForSlaves"] == "0", status

            # The fix the spec gives for 4.x semantics: inSyncReplicas=2, then the same send waits.
            admin.update_broker_config("slaveTimeout", str(SLAVE_TIMEOUT_MS), address=master["address"])
            admin.update_broker_config("inSyncReplicas", "2", address=master["address"])
            result = producer.send(topic, Message(b"now-waits"), broker_name="broker-a")
            assert result.status == "FLUSH_SLAVE_TIMEOUT", result
        finally:
            resume(slave)
            admin.update_broker_config("inSyncReplicas", "1", address=master["address"])
            admin.update_broker_config("slaveTimeout", "10000", address=master["address"])
        g.wait_caught_up(slave)
        assert sorted(m.body for m in read_topic(role_cluster["access_point"], topic)) == \
            [b"now-waits", b"trap-0", b"trap-1", b"trap-2"]


# Scenario 16: an ASYNC_MASTER ignores inSyncReplicas.

def test_async_master_ignores_in_sync_replicas(role_cluster):
    with closing(ReplicaGroup(role_cluster, broker_name="broker-b", send_timeout_s=30.0)) as g:
        master, slave, admin, producer = g.master, g.slave, g.admin, g.producer
        g.wait_in_sync()
        assert admin.broker_config(master["address"])["inSyncReplicas"] == "3"
        stop_process(slave, signal.SIGKILL)
        g.wait_slave_gone(slave)
        topic = new_topic()
        # A SYNC_MASTER would wait slaveTimeout for 2 more copies and answer FLUSH_SLAVE_TIMEOUT.
        results = [producer.send(topic, Message(f"async-{index}".encode()), broker_name="broker-b")
                   for index in range(3)]
        assert [result.status for result in results] == ["SEND_OK"] * 3, results
        status = admin.broker_status(master["address"])
        assert (status["brokerRole"], status["slaves"], status["inSyncReplicas"], status["waitingForSlaves"]) == \
            ("ASYNC_MASTER", "", "1", "0"), status
        assert sorted(m.body for m in read_topic(role_cluster["access_point"], topic)) == \
            [b"async-0", b"async-1", b"async-2"]


# Scenario 2: quorum met, the slave holds the same bytes at the same offsets.

def test_quorum_met_sends_are_ok_and_the_slave_log_is_byte_identical(quorum_group):
    g = quorum_group
    topic = new_topic()
    singles = [g.producer.send(topic, Message(f"single-{index}".encode(), tag="A", keys=f"k{index}",
                                              properties={"n": str(index)})) for index in range(5)]
    rng = random.Random(2)
    batch = g.producer.send_batch(topic, [Message(rng.randbytes(rng.randrange(1, 3000))) for _ in range(200)])
    assert [r.status for r in singles + batch] == ["SEND_OK"] * 205
    assert g.status()["waitingForSlaves"] == "0"
    end = g.wait_caught_up(g.slave)
    assert commit_log_bytes(g.slave["data_dir"], end) == commit_log_bytes(g.master["data_dir"], end)


# Scenario 3: the slave is gone; each send times out after slaveTimeout but is stored.

def test_slave_down_sends_time_out_after_slave_timeout_and_stay_on_the_master(quorum_group):
    g = quorum_group
    topic = new_topic()
    stop_process(g.slave, signal.SIGKILL)
    g.wait_slave_gone(g.slave)
    sent = []
    for index in range(3):
        result, elapsed = timed(g.producer.send, topic, Message(f"unreplicated-{index}".encode()), queue_id=0)
        assert result.status == "FLUSH_SLAVE_TIMEOUT", result
        assert result.queue_offset == index, result  # stored, in order
        assert SLAVE_TIMEOUT_MS / 1000 * 0.9 <= elapsed < SLAVE_TIMEOUT_MS / 1000 + HANG_SLACK_S, elapsed
        sent.append(result)
    status = g.status()
    assert (status["slaves"], status["inSyncReplicas"], status["waitingForSlaves"]) == ("", "1", "0"), status
    received = read_topic(g.cluster["access_point"], topic)
    assert [(m.message_id, m.body) for m in received] == \
        [(r.message_id, f"unreplicated-{index}".encode()) for index, r in enumerate(sent)]


# Scenario 18: a flush timeout and a slave timeout together: the replica status wins.

def test_flush_and_slave_timeout_together_give_flush_slave_timeout(quorum_group):
    g = quorum_group
    topic = new_topic()
    # syncFlushTimeout=0 gives up on the fsync before it can complete (the group-commit flush runs
    # in a worker thread, the zero timer fires first): a disk too slow for its timeout.
    g.configure(syncFlushTimeout=0)
    g.configure(inSyncReplicas=1)
    result = g.producer.send(topic, Message(b"flush-only"), queue_id=0)
    assert result.status == "FLUSH_DISK_TIMEOUT", result  # the flush alone times out

    os.kill(g.slave["pid"], signal.SIGSTOP)  # connected but silent: no ack comes
    g.configure(inSyncReplicas=2)
    result, elapsed = timed(g.producer.send, topic, Message(b"flush-and-slave"), queue_id=0)
    assert result.status == "FLUSH_SLAVE_TIMEOUT", result
    assert elapsed < SLAVE_TIMEOUT_MS / 1000 + HANG_SLACK_S
    resume(g.slave)
    assert [m.body for m in read_topic(g.cluster["access_point"], topic)] == [b"flush-only", b"flush-and-slave"]


# Scenario 19: a slave refuses sends.

def test_send_to_a_slave_is_refused_and_nothing_is_stored(quorum_group):
    g = quorum_group
    # The slave copies its master's topics every few seconds; once it has them all, its count of
    # topics only changes if the refused send creates one there.
    check_for(SETTLE_S, 0.1, lambda: g.status(g.slave)["topicCount"] == g.status()["topicCount"],
              "the slave mirrors the master's topics")
    before = g.status(g.slave)
    topic = new_topic()
    response = v5_send(g.slave["address"], v5_message(topic, b"to-the-slave"))
    [entry] = response.entries
    assert entry.status.code == v5.Code.HA_NOT_AVAILABLE, entry
    assert entry.status.message.startswith("SERVICE_NOT_AVAILABLE"), entry.status.message
    assert response.status.code == v5.Code.HA_NOT_AVAILABLE
    after = g.status(g.slave)
    for key in ("commitLogMaxOffset", "msgPutTotal", "topicCount"):
        assert after[key] == before[key], (key, before, after)
    assert topic not in g.admin.topic_list()


# Admission before auto-creation: the pending bound.

def test_a_send_refused_for_too_many_pending_messages_creates_no_topic(quorum_group):
    """With PENDING_SEND_MESSAGES_MAX messages waiting for a silent slave's ack, a send to a new topic
    is refused (TOO_MANY_REQUESTS) and leaves the topic on no broker and in no route
    (autoCreateTopicEnable is on). The batches then complete once the slave resumes."""
    g = quorum_group
    topic, refused = g.new_topic(), new_topic()
    batches, batch = 20, limits.PENDING_SEND_MESSAGES_MAX // 20
    g.configure(slaveTimeout=60_000)  # the batches keep waiting while the test looks
    topics = g.status()["topicCount"]
    os.kill(g.slave["pid"], signal.SIGSTOP)  # connected but silent: every batch waits for its ack
    try:
        with closing(Blocking(Producer, g.cluster["access_point"], window=batches, timeout_s=90.0)) as producer, \
                ThreadPoolExecutor(batches) as pool:
            waiting = [pool.submit(producer.send_batch, topic, [Message(b"p") for _ in range(batch)], queue_id=0)
                       for _ in range(batches)]
            g.wait_status(pendingMessages=limits.PENDING_SEND_MESSAGES_MAX)
            response = v5_send(g.master["address"], v5_message(refused, b"refused"))
            resume(g.slave)
            assert {result.status for future in waiting for result in future.result()} == {"SEND_OK"}
    finally:
        resume(g.slave)
    assert "TOO_MANY_REQUESTS" in response.status.message, response.status
    g.assert_no_topic_made(refused, topics)


# Live change of inSyncReplicas with `quorumq admin updateBrokerConfig`.

def test_in_sync_replicas_changed_live_applies_to_the_next_send(quorum_group):
    g = quorum_group
    namesrv, topic = g.cluster["access_point"], new_topic()
    stop_process(g.slave, signal.SIGKILL)
    g.wait_slave_gone(g.slave)

    def send_message(body: str) -> str:
        done = cli("admin", "sendMessage", "-n", namesrv, "-t", topic, "-p", body)
        return done.stdout.split()[0] if done.stdout else done.stderr

    def update(value: str) -> None:
        done = cli("admin", "updateBrokerConfig", "-n", namesrv, "-b", g.master["address"],
                   "-k", "inSyncReplicas", "-v", value)
        assert done.returncode == 0, done.stderr

    assert send_message("needs-two") == "FLUSH_SLAVE_TIMEOUT"
    update("1")
    assert g.admin.broker_config(g.master["address"])["inSyncReplicas"] == "1"
    assert send_message("needs-one") == "SEND_OK"
    update("2")
    assert g.producer.send(topic, Message(b"needs-two-again")).status == "FLUSH_SLAVE_TIMEOUT"
    assert sorted(m.body for m in read_topic(namesrv, topic)) == [b"needs-one", b"needs-two", b"needs-two-again"]


# A client's retry of a send that timed out on its slave is not stored twice.

def test_official_client_retry_after_flush_slave_timeout_is_stored_once(quorum_group):
    g = quorum_group
    topic = new_topic()
    producer = OfficialProducer(ClientConfiguration(g.cluster["access_point"], Credentials(), request_timeout=10))
    producer.startup()
    try:
        warm_up = OfficialMessage()
        warm_up.topic, warm_up.body = topic, b"warm-up"
        producer.send(warm_up)  # the route is known: the next send goes out at once

        # Record each attempt the client makes (the client retries at once, without a backoff),
        # and let the slave go on as soon as the first attempt came back FLUSH_SLAVE_TIMEOUT.
        rpc = producer.rpc_client
        send_message_async = rpc.send_message_async
        attempts: list[tuple[str, list]] = []

        def recording(endpoints, request, metadata, timeout=3):
            outcome: list = []
            attempts.append((request.messages[0].system_properties.message_id, outcome))
            future = send_message_async(endpoints, request, metadata, timeout=timeout)

            def done(f):
                code = f.result().status.code if f.exception() is None else repr(f.exception())
                outcome.append(code)
                if code == v5.Code.SLAVE_PERSISTENCE_TIMEOUT:
                    resume(g.slave)

            future.add_done_callback(done)
            return future

        rpc.send_message_async = recording
        os.kill(g.slave["pid"], signal.SIGSTOP)
        message = OfficialMessage()
        message.topic, message.body = topic, b"retried"
        receipt = producer.send(message)
        rpc.send_message_async = send_message_async
    finally:
        resume(g.slave)
        producer.shutdown()
    check_for(5, 0.05, lambda: all(outcome for _, outcome in attempts), "every attempt answered")
    # Normally two attempts; a third if the resumed slave took longer than slaveTimeout to ack.
    outcomes = [(message_id, outcome[0]) for message_id, outcome in attempts]
    assert len(outcomes) >= 2, outcomes
    assert outcomes[0] == (receipt.message_id, v5.Code.SLAVE_PERSISTENCE_TIMEOUT), outcomes
    assert outcomes[-1] == (receipt.message_id, v5.Code.OK), outcomes
    assert {message_id for message_id, _ in outcomes} == {receipt.message_id}, "a retry with another id"
    stored = [m for m in read_topic(g.cluster["access_point"], topic) if m.body == b"retried"]
    assert [m.message_id for m in stored] == [receipt.message_id], "the retry was stored again"
    assert stored[0].queue_offset == receipt.offset
    g.wait_caught_up(g.slave)


def test_v5_send_repeated_with_the_same_message_id_is_stored_once(quorum_group):
    """The dedupe without any client's retry policy: the same SendMessage twice, as a client that
    retries later (after the slave came back) would send it."""
    g = quorum_group
    topic = new_topic()
    message = v5_message(topic, b"twice")
    os.kill(g.slave["pid"], signal.SIGSTOP)
    try:
        first = v5_send(g.master["address"], message)
    finally:
        resume(g.slave)
    assert first.entries[0].status.code == v5.Code.SLAVE_PERSISTENCE_TIMEOUT, first
    g.wait_in_sync()
    second = v5_send(g.master["address"], message)
    assert second.entries[0].status.code == v5.Code.OK, second
    assert second.entries[0].offset == first.entries[0].offset
    stored = read_topic(g.cluster["access_point"], topic)
    assert [(m.message_id, m.body) for m in stored] == [(message.system_properties.message_id, b"twice")]


# Durability: every SEND_OK of a quorum write survives the master's death on the slave.

def test_every_acknowledged_message_is_on_the_slave_after_the_master_is_killed(start_cluster):
    cluster = start_cluster(replicas=2, sets={**COMMON_SETTINGS, "brokerRole": "SYNC_MASTER",
                                              "inSyncReplicas": "2", "defaultTopicQueueNums": "4"})
    topic = new_topic()
    rng = random.Random(20261122)
    acked: dict[tuple[int, int], tuple[str, bytes, str]] = {}  # (queue, offset) -> (id, body, n)
    failures: list[ClientError] = []  # the requests the dead master did not answer
    stop = threading.Event()

    def send_until_broken(producer) -> None:
        sequence = 0
        while not stop.is_set():
            messages = []
            for _ in range(256):
                messages.append(Message(rng.randbytes(rng.randrange(1, 2048)), tag="D",
                                        properties={"n": str(sequence)}))
                sequence += 1
            try:
                results = producer.send_batch(topic, messages)
            except ClientError as error:
                failures.append(error)
                return
            for message, result in zip(messages, results):
                if result.status == "SEND_OK":
                    key = (result.queue_id, result.queue_offset)
                    assert key not in acked, f"{key} acknowledged twice"
                    acked[key] = (result.message_id, message.body, message.properties["n"])

    with closing(ReplicaGroup(cluster)) as group:
        group.wait_in_sync()
    master, slave = group.master, group.slave
    with Blocking(Producer, cluster["access_point"], timeout_s=5.0, batch_messages=64) as producer:
        sender = threading.Thread(target=send_until_broken, args=(producer,))
        sender.start()
        try:
            check_for(60, 0.01, lambda: len(acked) >= 3000 or not sender.is_alive(), "3000 messages acknowledged")
            stop_process(master, signal.SIGKILL)  # while batches are in flight
        finally:
            stop.set()
            sender.join(timeout=60)
    assert not sender.is_alive()
    assert len(acked) >= 3000, f"only {len(acked)} acknowledged; failures: {failures[:3]}"

    stop_process(slave)
    master_store, slave_store = open_store(master), open_store(slave)
    try:
        assert slave_store.max_offset <= master_store.max_offset
        end = slave_store.max_offset
        assert commit_log_bytes(slave["data_dir"], end) == commit_log_bytes(master["data_dir"], end)
        missing, changed = [], []
        for (queue_id, queue_offset), (message_id, body, sequence) in sorted(acked.items()):
            [on_slave] = slave_store.get_messages(topic, queue_id, queue_offset, 1, 1 << 20).messages or [None]
            [on_master] = master_store.get_messages(topic, queue_id, queue_offset, 1, 1 << 20).messages
            if on_slave is None or on_slave.queue_offset != queue_offset:
                missing.append((queue_id, queue_offset))
                continue
            assert (on_master.properties[MESSAGE_ID], on_master.body) == (message_id, body)
            if (on_slave.commit_log_offset, on_slave.properties, on_slave.body) != \
                    (on_master.commit_log_offset, on_master.properties, on_master.body) or \
                    (on_slave.properties[MESSAGE_ID], on_slave.properties["n"]) != (message_id, sequence):
                changed.append((queue_id, queue_offset))
        assert not missing, f"{len(missing)} of {len(acked)} acknowledged messages not on the slave: {missing[:5]}"
        assert not changed, f"{len(changed)} acknowledged messages differ on the slave: {changed[:5]}"
    finally:
        master_store.close()
        slave_store.close()
