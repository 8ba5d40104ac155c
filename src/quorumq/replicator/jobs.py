"""The replicator's jobs, each its own streaming query with its own checkpoint directory:

- replicate (RocketMQSourceConnector): the chosen topics, source -> target, through the quorumq
  source and sink;
- heartbeat: a tick that sends a heartbeat to the source's HEARTBEAT_TOPIC, a replicate query of
  that topic, and the tick reads the target's copy back for latency and connectivity;
- checkpoint: translates consumer-group offsets from the source to the target through the offset
  syncs the replicate sink writes with each batch, for groups with no live consumer on the target;
- config: copies topics (queue numbers, permission, message type) to the target, created or
  expanded, never shrunk, the consumer groups the source knows, their subscription configs, and
  the ACL 2.0 users and rules (created and updated; deleted only with `acl_deletes`).

Every client signs its calls as the replicator's user of its cluster (Settings' credentials).

The small jobs run on the driver from `foreachBatch` of Spark's `rate` source, so they too get a
trigger, progress and restart handling from Spark.
"""

import json
import logging
import shutil
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

from quorumq import limits
from quorumq.client import Blocking, ClientError, PullConsumer
from quorumq.cluster import cluster_pb2 as pb
from quorumq.core import replicator as plan
from quorumq.core.auth import Credentials
from quorumq.core.message_types import TopicMessageType
from quorumq.core.replicator import Access, AccessChanges, OffsetSync, OffsetSyncStore, QueueKey, TopicShape
from quorumq.core.subscription import SubscriptionGroup
from quorumq.protocol.access import access_from_pb, entry_to_pb, user_to_pb
from quorumq.protocol.configs import group_from_pb, group_to_pb, message_type_from_pb
from quorumq.replicator import clients
from quorumq.replicator.datasource import FORMAT
from quorumq.store.atomic_file import write_atomically

log = logging.getLogger("quorumq.replicator")

HEARTBEAT_TOPIC = "rmq_sys_replicator_heartbeat"
OFFSET_SYNC_TOPIC = "rmq_sys_replicator_offset_sync"
SYSTEM_TOPIC_QUEUES = 1  # one queue keeps the system topics' records in one order


@dataclass(frozen=True)
class Settings:
    source: str  # access point of the primary
    target: str  # access point of the standby
    topics: tuple[str, ...]
    checkpoint: Path  # local: one directory per job below it, status files beside them
    tag_filters: dict[str, str]
    on_failure: str = "fail"
    dedupe: bool = False
    starting: str = "latest"
    groups: tuple[str, ...] = ()  # consumer groups the checkpoint job translates (RocketMQ's sync.gids)
    max_records_per_trigger: int = limits.REPLICATOR_MAX_RECORDS_PER_TRIGGER
    trigger_s: float = 1.0
    heartbeat_interval_s: float = limits.REPLICATOR_HEARTBEAT_INTERVAL_S
    checkpoint_interval_s: float = limits.REPLICATOR_CHECKPOINT_INTERVAL_S
    config_interval_s: float = limits.REPLICATOR_CONFIG_INTERVAL_S
    source_credentials: Credentials | None = None  # the replicator's user on each side (a Super user
    target_credentials: Credentials | None = None  # with authorizationEnabled)
    acl_deletes: bool = False  # the config job deletes the target's users and rules the source lacks

    def job_dir(self, job: str) -> Path:
        return self.checkpoint / job

    @property
    def metrics_path(self) -> Path:
        return self.checkpoint / "replicate-metrics.json"

    @property
    def heartbeat_path(self) -> Path:
        return self.checkpoint / "heartbeat.json"

    @property
    def groups_path(self) -> Path:
        return self.checkpoint / "checkpoint-groups.json"


def _start(spark: Any, name: str, writer: Any, settings: Settings, interval_s: float) -> Any:
    """Start a job's query, named by job and direction (a session may run both directions)."""
    spark.sparkContext.setLocalProperty("spark.scheduler.pool", name)  # FAIR: small jobs never wait behind data
    direction = (f"{clients.cluster_name(settings.source, settings.source_credentials)}->"
                 f"{clients.cluster_name(settings.target, settings.target_credentials)}")
    _forget_if_unplanned(settings.job_dir(name))
    return (writer.queryName(f"{name} {direction}").option("checkpointLocation", str(settings.job_dir(name)))
            .trigger(processingTime=f"{interval_s} seconds").start())


def _forget_if_unplanned(checkpoint: Path) -> None:
    """A driver killed while a query started leaves its checkpoint with files (its metadata, a rate
    source's start time) but no planned batch, and Spark refuses such a directory at every restart
    (STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY). A batch's offsets are logged before it writes
    anything, so a query with none has nothing to resume: it starts afresh."""
    if checkpoint.is_dir() and not any(entry.name.isdigit() for entry in (checkpoint / "offsets").glob("*")):
        log.warning("%s: no batch was planned before the driver stopped; the query starts afresh", checkpoint)
        shutil.rmtree(checkpoint)


def _signed(options: Any, credentials: Credentials | None) -> Any:
    """A reader's or writer's options with the user its tasks sign as (datasource.py)."""
    if credentials is None:
        return options
    return options.option("accessKey", credentials.access_key).option("secretKey", credentials.secret_key)


def _replicate(spark: Any, settings: Settings, name: str, topics: tuple[str, ...], offset_syncs: bool) -> Any:
    reader = _signed(spark.readStream.format(FORMAT).option("accessPoint", settings.source)
                     .option("topics", ",".join(topics)).option("tagFilters", json.dumps(settings.tag_filters))
                     .option("startingOffsets", settings.starting).option("records", "true")
                     .option("maxRecordsPerTrigger", str(settings.max_records_per_trigger))
                     .option("maxPartitions", str(spark.sparkContext.defaultParallelism)),
                     settings.source_credentials).load()
    writer = _signed(reader.writeStream.format(FORMAT).option("accessPoint", settings.target)
                     .option("cluster", clients.cluster_name(settings.target, settings.target_credentials))
                     .option("onFailure", settings.on_failure).option("dedupe", str(settings.dedupe).lower()),
                     settings.target_credentials)
    if offset_syncs:
        writer = writer.option("offsetSyncTopic", OFFSET_SYNC_TOPIC).option("metricsPath", str(settings.metrics_path))
    return _start(spark, name, writer, settings, settings.trigger_s)


def stop(query: Any) -> None:
    """Stop a query between micro-batches, waiting up to REPLICATOR_STOP_WAIT_S for the running
    one to commit. A query stopped mid-batch makes Spark abort that batch (it logs "Data source
    write support ... is aborting" at ERROR): harmless, since the batch is replayed at the next
    start, but alarming on a clean stop."""
    deadline = clients.clock().monotonic() + limits.REPLICATOR_STOP_WAIT_S
    while query.isActive and query.status["isTriggerActive"] and clients.clock().monotonic() < deadline:
        time.sleep(0.05)  # Spark tells no batch's end: polled
    query.stop()


def start_replicate(spark: Any, settings: Settings) -> Any:
    ensure_system_topic(settings.target, settings.target_credentials, OFFSET_SYNC_TOPIC)
    return _replicate(spark, settings, "replicate", settings.topics, offset_syncs=True)


def _tick(spark: Any, name: str, settings: Settings, interval_s: float, work: Callable[[], None]) -> Any:
    """A query that runs `work` on the driver every interval."""
    def each_batch(_rows: Any, _batch_id: int) -> None:
        work()

    writer = spark.readStream.format("rate").option("rowsPerSecond", 1).load().writeStream.foreachBatch(each_batch)
    return _start(spark, name, writer, settings, interval_s)


# Config.

@dataclass(frozen=True)
class Masters:
    """The masters of the cluster behind an access point as one look-up found them: each one's
    address and metadata (topics as the broker holds them, consumer groups, subscription configs,
    the users and rules made at run time), by broker name; and the credentials it was asked with."""

    access_point: str
    credentials: Credentials | None
    addresses: dict[str, str]
    metadata: dict[str, Any]

    def admin(self) -> Any:
        return clients.admin(self.access_point, self.credentials)


def masters(access_point: str, credentials: Credentials | None) -> Masters:
    admin = clients.admin(access_point, credentials)
    brokers = admin.brokers(clients.cluster_name(access_point, credentials), masters_only=True)
    addresses = {broker.broker_name: broker.address for broker in brokers}
    return Masters(access_point, credentials, addresses,
                   {broker: admin.metadata(address) for broker, address in addresses.items()})


def copy_topics(source: Masters, target: Masters, topics: tuple[str, ...]) -> dict[str, dict[str, TopicShape]]:
    """Create or expand each topic on every master of the target as the source has it; the changes
    made, by topic and target broker name."""
    source_shapes, target_shapes = _topic_shapes(source), _topic_shapes(target)
    made = {}
    for topic in topics:
        source_topic = {broker: shapes[topic] for broker, shapes in source_shapes.items() if topic in shapes}
        changes = plan.topic_changes(source_topic, {broker: target_shapes[broker].get(topic)
                                                    for broker in target.addresses})
        for broker, shape in changes.items():
            target.admin().update_topic(target.addresses[broker], topic, shape.read_queue_nums,
                                        shape.write_queue_nums, shape.perm, shape.message_type.value)
            log.info("config: %s on %s of the target is now read %d write %d perm %d type %s", topic, broker,
                     shape.read_queue_nums, shape.write_queue_nums, shape.perm, shape.message_type.value)
        if changes:
            made[topic] = changes
    return made


def _topic_shapes(masters: Masters) -> dict[str, dict[str, TopicShape]]:
    """Broker name -> topic -> shape, of every master (as each broker holds it, not as a route
    would show a topic that does not exist yet)."""
    return {broker: {t.name: TopicShape(t.read_queue_nums, t.write_queue_nums, t.perm,
                                        message_type_from_pb(t.message_type) or TopicMessageType.NORMAL)
                     for t in metadata.topics}
            for broker, metadata in masters.metadata.items()}


def copy_groups(source: Masters, target: Masters) -> dict[str, dict[str, int]]:
    """Make every master of the target know the consumer groups the source's masters know, each
    from its earliest first contact there (core.replicator.group_changes), so that a group moved to
    the target, on a queue it has no offset for, starts no later than the copies of what the source
    stored after that contact (from 0 when the target queue's first copy is in memory); the groups
    added (first contact, ms), by target broker name. Offsets are not copied: they differ between
    clusters, and the checkpoint job translates them (a group has one on every queue it received
    from, its start included)."""
    source_groups, target_groups = ({broker: dict(data.groups) for broker, data in side.metadata.items()}
                                    for side in (source, target))
    changes = plan.group_changes(source_groups, target_groups)
    for broker, groups in changes.items():
        target.admin().add_consumer_groups(target.addresses[broker], groups)
        log.info("config: %s of the target now knows the groups %s", broker, ", ".join(groups))
    return changes


def copy_subscriptions(source: Masters, target: Masters) -> dict[str, dict[str, SubscriptionGroup]]:
    """Make every master of the target hold the subscription configs the source's masters hold
    (core.replicator.subscription_changes), as updateSubGroup would; the configs set, by target
    broker name."""
    source_groups, target_groups = ({broker: {config.group_name: group_from_pb(config)
                                              for config in data.subscription_groups}
                                     for broker, data in side.metadata.items()} for side in (source, target))
    changes = plan.subscription_changes(source_groups, target_groups)
    for broker, groups in changes.items():
        for group in groups.values():
            target.admin().update_subscription_group([target.addresses[broker]], group_to_pb(group))
        log.info("config: %s of the target now has the subscription configs of %s", broker, ", ".join(groups))
    return changes


def copy_access(source: Masters, target: Masters, deletes: bool) -> dict[str, AccessChanges]:
    """Make every master of the target hold the ACL 2.0 users and rules the source's masters made
    at run time (core.replicator.access_changes; those of a broker's config are not in its metadata
    and are not copied), deleting what the source lacks only with `deletes`; never the user the
    replicator signs as on the target. The changes made, by target broker name."""
    def access(masters: Masters) -> dict[str, Access]:
        return {broker: Access(*access_from_pb(data.access)) for broker, data in masters.metadata.items()}

    own = (target.credentials.access_key,) if target.credentials else ()
    changes = plan.access_changes(access(source), access(target), deletes, own)
    for broker, change in changes.items():
        at = [target.addresses[broker]]
        admin = target.admin()
        for method, users in (("CreateUser", change.create_users), ("UpdateUser", change.update_users)):
            for user in users:
                admin.change_access(at, method, user_to_pb(user))
        for subject, resources in change.delete_entries.items():
            admin.change_access(at, "DeleteAcl", pb.AclRequest(subject=subject, resources=map(str, resources)))
        for subject, entries in change.set_rules.items():
            admin.change_access(at, "CreateAcl", pb.Acl(subject=subject, entries=map(entry_to_pb, entries)))
        for subject in change.delete_rules:
            admin.change_access(at, "DeleteAcl", pb.AclRequest(subject=subject))
        for username in change.delete_users:
            admin.change_access(at, "DeleteUser", pb.UserRequest(username=username))
        # Names only: a user's password is never logged.
        log.info("config: %s of the target: users created %s, updated %s, deleted %s; rules set for %s, "
                 "deleted for %s, entries deleted for %s", broker, [u.username for u in change.create_users],
                 [u.username for u in change.update_users], list(change.delete_users), list(change.set_rules),
                 list(change.delete_rules), list(change.delete_entries))
    return changes


def copy_config(settings: Settings) \
        -> tuple[dict[str, dict[str, TopicShape]], dict[str, dict[str, int]], dict[str, dict[str, SubscriptionGroup]],
                 dict[str, AccessChanges]]:
    """One run of the config job: the topics, then the consumer groups, their subscription configs
    and the users and rules, from one look-up of each cluster's masters (a topic's change leaves the
    rest as it was); the changes made."""
    source, target = (masters(settings.source, settings.source_credentials),
                      masters(settings.target, settings.target_credentials))
    return (copy_topics(source, target, settings.topics), copy_groups(source, target),
            copy_subscriptions(source, target), copy_access(source, target, settings.acl_deletes))


def ensure_system_topic(access_point: str, credentials: Credentials | None, topic: str) -> None:
    """A system topic with one queue on every master that lacks it."""
    found = masters(access_point, credentials)
    for broker, shapes in _topic_shapes(found).items():
        if topic not in shapes:
            found.admin().update_topic(found.addresses[broker], topic, SYSTEM_TOPIC_QUEUES, SYSTEM_TOPIC_QUEUES)


def start_config(spark: Any, settings: Settings) -> Any:
    return _tick(spark, "config", settings, settings.config_interval_s, lambda: copy_config(settings))


# Heartbeat.

def start_heartbeat(spark: Any, settings: Settings) -> list[Any]:
    for access_point, credentials in ((settings.source, settings.source_credentials),
                                      (settings.target, settings.target_credentials)):
        ensure_system_topic(access_point, credentials, HEARTBEAT_TOPIC)
    heartbeat = Heartbeat(settings)
    forward = _replicate(spark, replace(settings, starting="latest", dedupe=False, on_failure="fail"),
                         "heartbeat-forward", (HEARTBEAT_TOPIC,), offset_syncs=False)
    return [forward, _tick(spark, "heartbeat", settings, settings.heartbeat_interval_s, heartbeat.beat)]


class Heartbeat:
    """Each beat reads the newest heartbeat the target holds from this source, then sends the next
    one to the source; the status (last latency, whether the path is alive) goes to a JSON file."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.source_cluster = clients.cluster_name(settings.source, settings.source_credentials)
        self.sequence = 0

    def beat(self) -> None:
        settings = self.settings
        status = {"sourceCluster": self.source_cluster, "checkedAt": clients.clock().now_ms(), **self._latest_arrival()}
        stale_ms = 3 * settings.heartbeat_interval_s * 1000
        status["alive"] = "sentAt" in status and status["checkedAt"] - status["sentAt"] <= stale_ms
        settings.heartbeat_path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(settings.heartbeat_path, json.dumps(status).encode())
        self.sequence += 1
        clients.send_json(settings.source, settings.source_credentials, HEARTBEAT_TOPIC,
                          {"source": self.source_cluster,
                           "target": clients.cluster_name(settings.target, settings.target_credentials),
                           "seq": self.sequence, "sentAt": clients.clock().now_ms()}, f"heartbeat-{self.sequence}")

    def _latest_arrival(self) -> dict:
        consumer = clients.consumer(self.settings.target, self.settings.target_credentials)
        end = consumer.query_offset(HEARTBEAT_TOPIC, 0, "END")
        offset = max(0, end - limits.REPLICATOR_PULL_BATCH)
        messages = consumer.pull(HEARTBEAT_TOPIC, 0, offset, limits.REPLICATOR_PULL_BATCH).messages if end else []
        for message in reversed(messages):
            if message.properties.get(plan.SOURCE_CLUSTER) == self.source_cluster:
                sent_at = json.loads(message.body)["sentAt"]
                return {"sentAt": sent_at, "arrivedAt": message.store_timestamp_ms,
                        "latencyMs": message.store_timestamp_ms - sent_at}
        return {}


# Checkpoint.

def start_checkpoint(spark: Any, settings: Settings) -> Any:
    translator = GroupTranslator(settings)
    return _tick(spark, "checkpoint", settings, settings.checkpoint_interval_s, translator.translate_groups)


class GroupTranslator:
    """Follows the offset syncs on the target and moves the target's committed offsets of the
    chosen groups to the translation of their source offsets: only forward, never past a message
    the group has not consumed on the source, and never while the group has a live consumer on the
    target. Each round's outcome goes to a JSON file (Settings.groups_path)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.source_cluster = clients.cluster_name(settings.source, settings.source_credentials)
        self.syncs = OffsetSyncStore()
        self.destinations: dict[QueueKey, tuple[str, int]] = {}  # source queue -> target (broker, queue id)
        self.position = 0  # in the offset-sync topic's queue 0 on the target

    def read_syncs(self) -> None:
        consumer = clients.consumer(self.settings.target, self.settings.target_credentials)
        while True:
            result = consumer.pull(OFFSET_SYNC_TOPIC, 0, self.position, limits.REPLICATOR_PULL_BATCH)
            for message in result.messages:
                self._add(json.loads(message.body))
            if result.next_offset <= self.position:
                return
            self.position = result.next_offset

    def _add(self, record: dict) -> None:
        for queue in record["queues"]:
            if queue["sourceCluster"] != self.source_cluster:
                continue  # another pipeline into the same target
            key = QueueKey(queue["topic"], queue["sourceBroker"], queue["sourceQueueId"])
            self.destinations[key] = (queue["broker"], queue["queueId"])
            self.syncs.add(key, (OffsetSync(source, target) for source, target in queue["syncs"]))

    def translate_groups(self) -> dict[str, dict[QueueKey, int]]:
        """Translate every chosen group that has no live consumer on the target; the target offsets
        committed, by group translated."""
        try:
            self.read_syncs()
        except ClientError as error:
            if error.name != "TOPIC_NOT_FOUND":  # nothing replicated yet
                raise
        target, credentials = self.settings.target, self.settings.target_credentials
        target_admin, target_cluster = clients.admin(target, credentials), clients.cluster_name(target, credentials)
        live = {group: {broker.broker_name: broker.live_consumers
                        for broker in target_admin.consumer_connections(group, target_cluster)}
                for group in self.settings.groups}
        writable, skipped = plan.groups_to_checkpoint(self.settings.groups, live)
        for group, consumers in skipped.items():
            log.info("checkpoint: group %s left as it is: %d live consumers on the target", group, consumers)
        moved = {group: self._translate_group(group) for group in writable}
        status = {"checkedAt": clients.clock().now_ms(),
                  "translated": {group: len(queues) for group, queues in moved.items()}, "skipped": skipped}
        self.settings.groups_path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(self.settings.groups_path, json.dumps(status).encode())
        return moved

    def _translate_group(self, group: str) -> dict[QueueKey, int]:
        settings = self.settings
        source_admin = clients.admin(settings.source, settings.source_credentials)
        source_cluster = clients.cluster_name(settings.source, settings.source_credentials)
        committed = {}
        with Blocking(PullConsumer, settings.target, group, credentials=settings.target_credentials) as target:
            for topic in settings.topics:
                for broker in source_admin.consumer_progress(group, topic, source_cluster):
                    for queue in broker.queues:
                        key = QueueKey(topic, broker.broker_name, queue.queue_id)
                        if queue.consumer_offset < 0 or key not in self.destinations:
                            continue
                        translated = self.syncs.translate(key, queue.consumer_offset)
                        target_broker, target_queue = self.destinations[key]
                        current = target.get_offset(topic, target_queue, broker_name=target_broker)
                        if translated is not None and (current is None or translated > current):
                            target.commit_offset(topic, target_queue, translated, broker_name=target_broker)
                            committed[key] = translated
        if committed:
            log.info("checkpoint: group %s moved on the target: %s", group, committed)
        return committed
