"""The replicator's jobs on real Spark (local mode, one session for the module) between two real
quorumq clusters, A and B, started with `quorumq up --cluster A` and `--cluster B`."""

import collections
import json
import shutil
import uuid
from pathlib import Path

import pytest
from rocketmq import ClientConfiguration, Credentials, FilterExpression, SimpleConsumer

from harness import check_for, create_topic
from quorumq import limits
from quorumq.client import AdminClient, Blocking, Message, Producer, PullConsumer
from quorumq.core import replicator as plan
from quorumq.core.message_types import TopicMessageType
from quorumq.core.replicator import TopicShape
from quorumq.core.subscription import SubscriptionGroup
from quorumq.protocol.configs import group_from_pb, group_to_pb
from quorumq.replicator import jobs
from quorumq.replicator.app import spark_session
from quorumq.replicator.jobs import Settings
from replicator_support import (
    DEAD_LETTER_TOPIC,
    new_topic,
    produce,
    queue_ends,
    queue_messages,
    replicate_once,
    source_offsets,
    worker_environment,
)

WAIT_S = 90.0


@pytest.fixture(scope="module")
def spark():
    worker_environment()
    session = spark_session("local[2]", "quorumq-replicator-tests")
    try:
        yield session
    finally:
        session.stop()
        gateway = session.sparkContext._gateway
        gateway.shutdown()
        gateway.proc.kill()  # the JVM this module started, by its process
        gateway.proc.wait()
        type(session.sparkContext)._gateway = None
        type(session.sparkContext)._jvm = None


def settings_for(source: dict, target: dict, topic: str, checkpoint: Path, **options) -> Settings:
    defaults = dict(tag_filters={}, starting="earliest", max_records_per_trigger=400, trigger_s=0.5)
    return Settings(source=source["access_point"], target=target["access_point"], topics=(topic,),
                    checkpoint=checkpoint, **{**defaults, **options})


def copy_topics(primary: dict, standby: dict, topic: str) -> dict:
    """One run of the config job's topic part for one topic; the changes made."""
    return jobs.copy_topics(jobs.masters(primary["access_point"], None), jobs.masters(standby["access_point"], None),
                            (topic,))


def run_until(queries: list, done, what: str) -> None:
    """Wait for `done()` while the queries run, then for each query's trigger to end, so that the
    batch that did it has committed (the sink's commit writes the metrics), then stop them; a query
    that fails fails the test."""
    try:
        def finished():
            for query in queries:
                assert query.isActive, f"query {query.name} stopped: {query.exception()}"
            return done()

        check_for(WAIT_S, 0.5, finished, what)
        for query in queries:
            check_for(WAIT_S, 0.1, lambda query=query: not query.status["isTriggerActive"],
                      f"{query.name}'s batch committed")
    finally:
        for query in queries:
            query.stop()


def test_messages_arrive_in_per_queue_order_with_their_source_stamped(spark, clusters, tmp_path):
    primary, standby = clusters
    topic = new_topic()
    create_topic(primary, topic, 4)
    produce(primary, topic, per_queue=250, queues=4)
    assert copy_topics(primary, standby, topic) == {
        topic: {"broker-a": TopicShape(4, 4, 6)}}
    settings = settings_for(primary, standby, topic, tmp_path)
    run_until([jobs.start_replicate(spark, settings)], lambda: queue_ends(standby, topic, 4) == [250] * 4,
              "every message on the standby")

    originals = {queue: queue_messages(primary, topic, queue) for queue in range(4)}
    for queue in range(4):
        copies = queue_messages(standby, topic, queue)
        assert source_offsets(copies) == list(range(250)), "same queue id, same order, each once"
        assert [m.body for m in copies] == [m.body for m in originals[queue]]
        assert all(m.tag == "t" and m.keys == (f"k{i}",) and m.properties["index"] == str(i)
                   for i, m in enumerate(copies))
        assert {m.properties[plan.SOURCE_CLUSTER] for m in copies} == {"A"}
        assert [m.properties[plan.SOURCE_MESSAGE_ID] for m in copies] == [m.message_id for m in originals[queue]]
    totals = json.loads(settings.metrics_path.read_text())
    assert (totals["written"], totals["filtered"], totals["dismissed"]) == (1000, 0, 0)
    syncs = queue_messages(standby, jobs.OFFSET_SYNC_TOPIC, 0)
    assert syncs and all(json.loads(m.body)["queues"][0]["sourceCluster"] == "A" for m in syncs)


def test_active_active_drops_every_looped_message(spark, clusters, tmp_path):
    primary, standby = clusters
    topic = new_topic()
    for cluster in clusters:
        create_topic(cluster, topic, 2)
        produce(cluster, topic, per_queue=150, queues=2)
    forward = settings_for(primary, standby, topic, tmp_path / "a-to-b")
    backward = settings_for(standby, primary, topic, tmp_path / "b-to-a")
    queries = [jobs.start_replicate(spark, forward), jobs.start_replicate(spark, backward)]

    def both_sides_hold_both_births():
        return queue_ends(primary, topic, 2) == [300, 300] and queue_ends(standby, topic, 2) == [300, 300]

    def copies_came_back_and_were_dropped():
        totals = [json.loads(s.metrics_path.read_text()) for s in (forward, backward)]
        return both_sides_hold_both_births() and [t["filtered"] for t in totals] == [300, 300]

    run_until(queries, copies_came_back_and_were_dropped, "each side's copies filtered on the way back")
    for cluster in clusters:
        for queue in range(2):
            births = [m.body.split(b"-")[0] for m in queue_messages(cluster, topic, queue)]
            assert births.count(b"A") == births.count(b"B") == 150, "each message once on each side, none looped"


def standby_offsets(standby: dict, group: str, topic: str) -> list:
    with Blocking(PullConsumer, standby["access_point"], group) as consumer:
        return [consumer.get_offset(topic, queue) for queue in range(2)]


def checkpoint_round(settings: Settings, after_ms: int):
    """The checkpoint job's outcome (checkpoint-groups.json) of a round that ran after `after_ms`, else None."""
    status = json.loads(settings.groups_path.read_text()) if settings.groups_path.exists() else {}
    return status if status.get("checkedAt", 0) > after_ms else None


def test_a_group_moved_to_the_standby_skips_nothing_and_never_moves_under_a_live_consumer(spark, clusters, tmp_path):
    primary, standby = clusters
    topic, group = new_topic(), "MovingGroup"
    create_topic(primary, topic, 2)
    produce(primary, topic, per_queue=300, queues=2)
    copy_topics(primary, standby, topic)
    settings = settings_for(primary, standby, topic, tmp_path, groups=(group,), checkpoint_interval_s=1.0)
    run_until([jobs.start_replicate(spark, settings)], lambda: queue_ends(standby, topic, 2) == [300, 300],
              "everything replicated")
    consumed = {0: 137, 1: 300}  # the group consumed part of queue 0 and all of queue 1 on the primary
    with Blocking(PullConsumer, primary["access_point"], group) as consumer:
        for queue, offset in consumed.items():
            consumer.commit_offset(topic, queue, offset)

    # A consumer of the group already reads on the standby: while it is there, its offsets are its own.
    live = SimpleConsumer(ClientConfiguration(standby["access_point"], Credentials(), request_timeout=5), group,
                          {topic: FilterExpression("*")}, await_duration=1)
    live.startup()
    checkpoint = None
    try:
        try:
            for message in live.receive(16, 30):
                live.ack(message)
            own = standby_offsets(standby, group, topic)
            checkpoint = jobs.start_checkpoint(spark, settings)
            first = check_for(WAIT_S, 0.2, lambda: checkpoint_round(settings, 0), "a checkpoint round")
            second = check_for(WAIT_S, 0.2, lambda: checkpoint_round(settings, first["checkedAt"]), "another round")
            assert standby_offsets(standby, group, topic) == own, "the live consumer's offsets left as it committed"
            assert [(r["translated"], list(r["skipped"])) for r in (first, second)] == [({}, [group])] * 2
        finally:
            live.shutdown()
        run_until([checkpoint], lambda: group in checkpoint_round(settings, 0)["translated"],
                  "the group translated once its consumer left")
    finally:
        if checkpoint is not None:
            checkpoint.stop()

    with Blocking(PullConsumer, standby["access_point"], group) as consumer:
        for queue, offset in consumed.items():
            resumed_at = consumer.get_offset(topic, queue)
            resumed = source_offsets(queue_messages(standby, topic, queue)[resumed_at:])
            assert set(range(offset, 300)) <= set(resumed), "never after a message the group had not consumed"
            assert offset - limits.REPLICATOR_SYNC_SPACING <= (resumed[0] if resumed else 300) <= offset, \
                "near where it was"


def make_group_known(cluster: dict, group: str, topic: str) -> int:
    """A consumer of the group contacts the cluster, as the official client does; the group's first
    contact (ms) as the cluster's master records it."""
    consumer = SimpleConsumer(ClientConfiguration(cluster["access_point"], Credentials(), request_timeout=5), group,
                              {topic: FilterExpression("*")}, await_duration=1)
    consumer.startup()
    try:
        with Blocking(AdminClient, cluster["access_point"]) as admin:
            [master] = admin.brokers(masters_only=True)
            return check_for(30, 0.2, lambda: admin.metadata(master.address).groups.get(group), "the group known")
    finally:
        consumer.shutdown()


def test_config_job_creates_and_expands_topics_never_shrinks_and_copies_groups_and_their_configs(clusters,
                                                                                                   monkeypatch):
    primary, standby = clusters
    created, expanded, larger = new_topic(), new_topic(), new_topic()
    for topic in (created, expanded, larger):
        create_topic(primary, topic, 8)
    create_topic(standby, expanded, 4)
    create_topic(standby, larger, 16)
    group = "KnownGroup"
    first_contact_ms = make_group_known(primary, group, created)
    fifo = SubscriptionGroup(group, consume_message_orderly=True, retry_max_times=3)
    with Blocking(AdminClient, primary["access_point"]) as admin:
        admin.update_subscription_group([b.address for b in admin.brokers(masters_only=True)], group_to_pb(fifo))
    fetched = collections.Counter()  # master address -> metadata look-ups, which a run makes once
    for cluster in clusters:
        admin = jobs.clients.admin(cluster["access_point"], None)
        monkeypatch.setattr(admin, "metadata", lambda address, fetch=admin.metadata: fetched.update([address])
                            or fetch(address))
    changes, groups, configs, access = jobs.copy_config(Settings(primary["access_point"], standby["access_point"],
                                                                 (created, expanded, larger), Path(), {}))
    assert len(fetched) == 2 and set(fetched.values()) == {1}, fetched
    assert changes == {created: {"broker-a": TopicShape(8, 8, 6)}, expanded: {"broker-a": TopicShape(8, 8, 6)}}
    assert groups == {"broker-a": {group: first_contact_ms}}
    assert configs == {"broker-a": {group: fifo}}
    assert access == {}, "no users or rules on either side"
    with Blocking(AdminClient, standby["access_point"]) as admin:
        shapes = {t: [(q.read_queue_nums, q.write_queue_nums) for q in admin.route(t).queues]
                  for t in (created, expanded, larger)}
        [master] = admin.brokers(masters_only=True)
        assert admin.metadata(master.address).groups[group] == first_contact_ms, \
            "the standby knows the group, from its first contact on the primary"
        [(_, held)] = admin.subscription_groups(group)
        assert group_from_pb(held) == fifo and held.configured
    assert shapes == {created: [(8, 8)], expanded: [(8, 8)], larger: [(16, 16)]}
    assert jobs.copy_config(Settings(primary["access_point"], standby["access_point"], (created,), Path(), {})) \
        == ({}, {}, {}, {})


@pytest.mark.parametrize("records", [True, False], ids=["whole records", "decoded columns"])
def test_a_fifo_topic_arrives_fifo_with_each_message_in_its_group(clusters, records):
    """The config job makes the standby's copy of a FIFO topic FIFO, and the replicate job's source
    and sink carry each message's group: on the standby, whose broker puts a group in the queue its
    hash picks among the same 4 queues, each queue holds the same groups' messages in the same
    order. The source and sink run here without Spark (the code a task runs), to keep it cheap,
    with the source's whole records (the replicate job's) and its documented decoded columns."""
    primary, standby = clusters
    topic, groups = new_topic(), [f"order-{number}" for number in range(8)]
    with Blocking(AdminClient, primary["access_point"]) as admin:
        admin.update_topic_on([b.address for b in admin.brokers(masters_only=True)], topic, 4, 4, message_type="FIFO")
    with Blocking(Producer, primary["access_point"]) as producer:
        sent = producer.send_batch(topic, [Message(f"{group}-{index}".encode(), message_group=group)
                                           for index in range(5) for group in groups])
        assert all(result.ok for result in sent)
    assert copy_topics(primary, standby, topic) == {
        topic: {"broker-a": TopicShape(4, 4, 6, TopicMessageType.FIFO)}}
    with Blocking(AdminClient, standby["access_point"]) as admin:
        assert admin.topic_types()[topic] == "FIFO"
    reports = replicate_once(primary, standby, topic, records)
    assert sum(queue.written for report in reports for queue in report.queues) == len(sent)
    for queue in range(4):
        originals = [(m.message_group, m.body) for m in queue_messages(primary, topic, queue)]
        assert [(m.message_group, m.body) for m in queue_messages(standby, topic, queue)] == originals


def heartbeat_alive(settings: Settings):
    """heartbeat.json once a heartbeat has made the round trip, else False."""
    if not settings.heartbeat_path.exists():
        return False
    status = json.loads(settings.heartbeat_path.read_text())
    return status["alive"] and 0 <= status["latencyMs"] < 30_000 and status


def test_heartbeat_reports_latency_and_connectivity(spark, clusters, tmp_path):
    primary, standby = clusters
    settings = settings_for(primary, standby, "unused", tmp_path, heartbeat_interval_s=1.0, starting="latest")
    run_until(jobs.start_heartbeat(spark, settings), lambda: heartbeat_alive(settings),
              "a heartbeat arrived on the standby")
    [copy] = [m for m in queue_messages(standby, jobs.HEARTBEAT_TOPIC, 0)[-1:]]
    assert copy.properties[plan.SOURCE_CLUSTER] == "A" and json.loads(copy.body)["source"] == "A"


def test_a_job_stopped_before_its_first_batch_starts_again(spark, clusters, tmp_path):
    """F14 seed 461229844: a driver SIGKILLed while its heartbeat query started left the rate
    source's start in the checkpoint and its first batch's offsets in a temporary file not yet
    renamed into place; Spark refuses such a directory, so every restart of the driver failed and
    the standby fell behind for good. Here the checkpoints are cut back to that state: the jobs
    must start again."""
    primary, standby = clusters
    settings = settings_for(primary, standby, "unused", tmp_path, heartbeat_interval_s=1.0, starting="latest")
    jobs_started = ("heartbeat", "heartbeat-forward")
    run_until(jobs.start_heartbeat(spark, settings),
              lambda: all((settings.job_dir(job) / "offsets" / "0").exists() for job in jobs_started),
              "both queries' first batch planned")
    for job in jobs_started:
        directory = settings.job_dir(job)
        first_offsets = (directory / "offsets" / "0").read_bytes()
        for planned in ("offsets", "commits"):
            shutil.rmtree(directory / planned)
            (directory / planned).mkdir()
        (directory / "offsets" / f".0.{uuid.uuid4()}.tmp").write_bytes(first_offsets)
    assert (settings.job_dir("heartbeat") / "sources").is_dir()
    settings.heartbeat_path.unlink()
    run_until(jobs.start_heartbeat(spark, settings), lambda: heartbeat_alive(settings),
              "a heartbeat after the restart")


@pytest.fixture
def small_standby_messages(clusters):
    """The standby refuses bodies above 64 KiB for one test (maxMessageSize applies live)."""
    with Blocking(AdminClient, clusters[1]["access_point"]) as admin:
        admin.update_broker_config("maxMessageSize", str(64 * 1024))
        try:
            yield
        finally:
            admin.update_broker_config("maxMessageSize", str(limits.MESSAGE_BODY_BYTES_DEFAULT))


POISON = (5, 12)  # offsets of queue 0 with bodies the standby refuses


def poisoned_topic(primary: dict, standby: dict) -> str:
    topic = new_topic()
    create_topic(primary, topic, 2)
    produce(primary, topic, per_queue=5, queues=2)
    produce(primary, topic, per_queue=1, queues=1, body_bytes=100 * 1024, start=5)
    produce(primary, topic, per_queue=6, queues=1, start=6)
    produce(primary, topic, per_queue=1, queues=1, body_bytes=100 * 1024, start=12)
    produce(primary, topic, per_queue=7, queues=1, start=13)  # queue 0: 20 messages, two of them too large
    produce(primary, topic, per_queue=15, queues=1, start=5, first_queue=1)  # queue 1: 20 good ones
    copy_topics(primary, standby, topic)
    return topic


@pytest.mark.usefixtures("small_standby_messages")
def test_policy_fail_stops_the_batch_and_keeps_its_offsets(spark, clusters, tmp_path):
    primary, standby = clusters
    topic = poisoned_topic(primary, standby)
    query = jobs.start_replicate(spark, settings_for(primary, standby, topic, tmp_path))
    try:
        check_for(WAIT_S, 0.5, lambda: not query.isActive, "the query fails")
    finally:
        query.stop()
    assert "REPLICATION_FAILED" in str(query.exception())
    assert source_offsets(queue_messages(standby, topic, 0)) == list(range(5)), "nothing after the poison"
    assert not (tmp_path / "replicate" / "commits" / "0").exists(), "the batch is replayed on restart"


@pytest.mark.usefixtures("small_standby_messages")
def test_policy_dismiss_counts_and_skips_the_refused_records(spark, clusters, tmp_path):
    primary, standby = clusters
    topic = poisoned_topic(primary, standby)
    settings = settings_for(primary, standby, topic, tmp_path, on_failure="dismiss")
    run_until([jobs.start_replicate(spark, settings)], lambda: queue_ends(standby, topic, 2) == [18, 20],
              "the good records replicated")
    assert source_offsets(queue_messages(standby, topic, 0)) == [o for o in range(20) if o not in POISON]
    totals = check_for(10, 0.2, lambda: json.loads(settings.metrics_path.read_text()), "the batch committed")
    assert (totals["written"], totals["dismissed"], totals["handed"]) == (38, 2, 0)


@pytest.mark.usefixtures("small_standby_messages")
def test_policy_function_hands_the_refused_records_to_the_user(spark, clusters, tmp_path):
    primary, standby = clusters
    topic = poisoned_topic(primary, standby)
    create_topic(standby, DEAD_LETTER_TOPIC, 1)
    before = queue_ends(standby, DEAD_LETTER_TOPIC, 1)[0]
    settings = settings_for(primary, standby, topic, tmp_path, on_failure="replicator_support:to_dead_letter_topic")
    run_until([jobs.start_replicate(spark, settings)], lambda: queue_ends(standby, topic, 2) == [18, 20],
              "the good records replicated")
    notes = [json.loads(m.body) for m in queue_messages(standby, DEAD_LETTER_TOPIC, 0)[before:]]
    assert [(n["topic"], n["queue"], n["offset"], n["status"]) for n in notes] == [
        (topic, 0, offset, "MESSAGE_BODY_TOO_LARGE") for offset in POISON]
    totals = check_for(10, 0.2, lambda: json.loads(settings.metrics_path.read_text()), "the batch committed")
    assert (totals["written"], totals["dismissed"], totals["handed"]) == (38, 0, 2)
