"""A broker's metrics: RocketMQ 5's names where it has them (BrokerMetricsConstant,
DefaultStoreMetricsConstant), quorumq_ for the replica group's own (docs/observability.md).

The send and read paths call `stored`, `answered` and `read`: a few dict updates per request. The
rest is read from the broker when Prometheus scrapes (`collect`)."""

import asyncio
from collections.abc import Iterable, Mapping, Sequence

from rocketmq.grpc_protocol import definition_pb2 as v5

from quorumq import limits
from quorumq.clock import Clock
from quorumq.core.codec import store_timestamp_of
from quorumq.core.quorum import BrokerRole
from quorumq.metrics import MESSAGE_SIZE_BUCKETS, BoundedLabels, Families, Histogram, RpcLatency
from quorumq.store import AppendResult


class BrokerCounters:
    def __init__(self, clock: Clock) -> None:
        self.rpc = RpcLatency(clock)
        self.topic_label = BoundedLabels(limits.METRICS_TOPICS_MAX)
        self.group_topic_label = BoundedLabels(limits.METRICS_GROUP_TOPICS_MAX)
        self.messages_in: dict[str, int] = {}
        self.bytes_in: dict[str, int] = {}
        self.sizes: dict[str, Histogram] = {}
        self.messages_out: dict[tuple[str, str], int] = {}
        self.bytes_out: dict[tuple[str, str], int] = {}
        self.send_results: dict[str, int] = {}
        self.degraded_s = 0.0
        # An official client's session is its Telemetry stream: gRPC does not show the broker its
        # connections. (client type, consumer group, language, version) -> open sessions.
        self.sessions: dict[tuple[str, str, str, str], int] = {}
        self.group_label = BoundedLabels(limits.METRICS_GROUP_TOPICS_MAX)
        self.version_label = BoundedLabels(limits.METRICS_CLIENT_VERSIONS_MAX)

    def stored(self, topics: Mapping[str, int], appended: AppendResult) -> None:
        """A master stored messages (count per topic): RocketMQ counts the bytes written to the
        commit log, and a batch's messages at their average size."""
        count = sum(topics.values())
        written = appended.end_offset - appended.offsets[0][0]
        for topic, messages in topics.items():
            topic = self.topic_label(topic)
            self.messages_in[topic] = self.messages_in.get(topic, 0) + messages
            self.bytes_in[topic] = self.bytes_in.get(topic, 0) + written * messages // count
            sizes = self.sizes.get(topic)
            if sizes is None:
                sizes = self.sizes[topic] = Histogram(MESSAGE_SIZE_BUCKETS)
            sizes.observe(written / count, messages)

    def answered(self, status: str, messages: int = 1) -> None:
        """A send's outcome: a PutStatus name, or the error that refused it."""
        self.send_results[status] = self.send_results.get(status, 0) + messages

    def session_opened(self, settings: v5.Settings, metadata) -> tuple[str, str, str, str]:
        """A client's Telemetry stream got its settings: count it until `session_closed`."""
        headers = dict(metadata or ())
        group = settings.subscription.group.name if settings.HasField("subscription") else ""
        session = (_CLIENT_TYPES.get(settings.client_type, "other"), self.group_label(group) if group else "",
                   _LANGUAGES.get(headers.get("x-mq-language", ""), "other"),
                   self.version_label(headers.get("x-mq-client-version", "")[:limits.METRICS_LABEL_CHARS_MAX]))
        self.sessions[session] = self.sessions.get(session, 0) + 1
        return session

    def session_closed(self, session: tuple[str, str, str, str]) -> None:
        self.sessions[session] -= 1

    def read(self, topic: str, group: str, messages: int, size: int) -> None:
        key = self.group_topic_label((topic, group))
        self.messages_out[key] = self.messages_out.get(key, 0) + messages
        self.bytes_out[key] = self.bytes_out.get(key, 0) + size


# Label values for what clients send: the v5 client types, the official clients' languages.
_CLIENT_TYPES = {v5.ClientType.PRODUCER: "producer", v5.ClientType.PUSH_CONSUMER: "push",
                 v5.ClientType.SIMPLE_CONSUMER: "simple"}
# Node.js 1.0.8 says HTTP.
_LANGUAGES = {name: name.lower() for name in ("JAVA", "CPP", "DOTNET", "GOLANG", "RUST", "PYTHON", "PHP", "NODE_JS",
                                              "RUBY", "OBJECTIVE_C", "DART", "KOTLIN", "HTTP")}


async def sample_degraded(broker) -> None:
    """Add up the time a master's quorum is degraded, one sample a METRICS_SAMPLE_INTERVAL_S."""
    last = broker.clock.monotonic()
    while True:
        await asyncio.sleep(limits.METRICS_SAMPLE_INTERVAL_S)
        now = broker.clock.monotonic()
        if _degraded(broker):
            broker.metrics.degraded_s += now - last
        last = now


def _degraded(broker) -> bool:
    """A master with fewer copies in sync (its SyncStateSet in controller mode) than totalReplicas."""
    if broker.replication is None or broker.role is BrokerRole.SLAVE:
        return False
    if broker.sync_state is not None:
        return len(broker.sync_state.members) < broker.config["totalReplicas"]
    return broker.in_sync_replicas() < broker.config["totalReplicas"]


def collect(broker) -> Iterable:
    config, counters, store = broker.config, broker.metrics, broker.store
    families = Families({"cluster": config["brokerClusterName"], "node_type": "broker",
                         "node_id": config["brokerName"]})
    topic, group_topic = ["topic"], ["topic", "consumer_group"]
    yield counters.rpc.family(families)
    yield families.counter("rocketmq_messages_in_total", "messages a master stored", counters.messages_in, topic)
    yield families.counter("rocketmq_throughput_in_total", "commit-log bytes a master stored", counters.bytes_in,
                           topic)
    yield families.histogram("rocketmq_message_size", "stored message sizes in bytes", topic, counters.sizes)
    yield families.counter("rocketmq_messages_out_total", "messages read by consumers", counters.messages_out,
                           group_topic)
    yield families.counter("rocketmq_throughput_out_total", "bytes read by consumers", counters.bytes_out,
                           group_topic)
    lag, lag_latency, inflight = _consumer_positions(broker)
    yield families.gauge("rocketmq_consumer_lag_messages", "messages stored but not consumed", lag, group_topic)
    yield families.gauge("rocketmq_consumer_lag_latency", "age in milliseconds of the oldest message not consumed",
                         lag_latency, group_topic)
    yield families.gauge("rocketmq_consumer_inflight_messages", "messages received but not acked", inflight,
                         group_topic)
    producers, consumers = _sessions(counters.sessions)
    yield families.gauge("rocketmq_producer_connections", "official clients' producer sessions (Telemetry streams)",
                         producers, ["language", "version"])
    yield families.gauge("rocketmq_consumer_connections", "official clients' consumer sessions (Telemetry streams)",
                         consumers, ["consumer_group", "language", "version", "consume_mode"])
    yield families.gauge("rocketmq_topic_number", "topics", len(broker.topics.all()))
    yield families.gauge("rocketmq_consumer_group_number", "consumer groups", len(broker.consumers.groups))
    yield families.gauge("rocketmq_broker_permission", "brokerPermission", config["brokerPermission"])
    storage = ["storage_type", "storage_medium"]
    yield families.gauge("rocketmq_storage_size", "commit-log bytes held", {("local", "disk"): store.max_offset
                                                                             - store.min_offset}, storage)
    yield families.gauge("rocketmq_storage_flush_behind_bytes", "commit-log bytes written but not fsync'd",
                         {("local", "disk"): store.max_offset - store.flushed_offset}, storage)
    yield from _quorumq(broker, families)


def _sessions(sessions: Mapping[tuple[str, str, str, str], int]) -> tuple[dict, dict]:
    """Open sessions as RocketMQ labels them: producers by language and version, consumers also by
    group and consume mode (push, or simple: the SimpleConsumer's receives)."""
    producers: dict[tuple[str, str], int] = {}
    consumers: dict[tuple[str, str, str, str], int] = {}
    for (client_type, group, language, version), count in sessions.items():
        if client_type == "producer":
            producers[language, version] = producers.get((language, version), 0) + count
        elif group:
            key = (group, language, version, client_type)
            consumers[key] = consumers.get(key, 0) + count
    return producers, consumers


def _consumer_positions(broker) -> tuple[dict, dict, dict]:
    """Per (topic, group): the messages past its committed offsets, the age of the oldest of them
    (one record read per queue behind; none for the overflow label's pairs), and the messages
    leased to it."""
    lag: dict[tuple[str, str], int] = {}
    lag_latency: dict[tuple[str, str], int] = {}
    inflight: dict[tuple[str, str], int] = {}
    consumers, store, label = broker.consumers, broker.store, broker.metrics.group_topic_label
    now_ms = broker.clock.now_ms()
    for group, topic, queue_id, offset in consumers.positions():
        key = label((topic, group))
        behind = max(store.queue_max_offset(topic, queue_id) - offset, 0)
        lag[key] = lag.get(key, 0) + behind
        lag_latency.setdefault(key, 0)
        if behind and key[0] != limits.METRICS_OVERFLOW_LABEL:
            oldest = store.get_records(topic, queue_id, offset, 1, limits.PULL_BYTES_MAX, None,
                                       broker.readable_end()).messages
            stored_ms = store_timestamp_of(oldest[0]) if oldest else None
            if stored_ms is not None:
                lag_latency[key] = max(lag_latency[key], now_ms - stored_ms)
        inflight[key] = inflight.get(key, 0) + consumers.inflight(group, topic, queue_id)
    return lag, lag_latency, inflight


def _quorumq(broker, families: Families) -> Iterable:
    counters, store = broker.metrics, broker.store
    role = "slave" if broker.role is BrokerRole.SLAVE else "master"
    yield families.gauge("quorumq_broker_role", "1 for the role this replica holds",
                         {(str(broker.replica_id), role): 1}, ["broker_id", "role"])
    yield families.counter("quorumq_send_results_total", "messages answered, by send status or refusal",
                           counters.send_results, ["status"])
    yield families.counter("quorumq_degraded_quorum_seconds_total", "time this master held fewer copies in "
                           "sync than totalReplicas", counters.degraded_s)
    yield families.gauge("quorumq_commit_log_max_offset", "the end of the commit log", store.max_offset)
    if broker.controller_mode:
        yield families.gauge("quorumq_master_epoch", "the newest master epoch applied", broker.master_epoch)
    if broker.sync_state is not None:
        yield families.gauge("quorumq_sync_state_set_size", "SyncStateSet members", len(broker.sync_state.members))
        yield families.gauge("quorumq_sync_state_set_epoch", "SyncStateSet epoch: one more per change",
                             broker.sync_state.epoch)
    if broker.replication is not None and broker.role is not BrokerRole.SLAVE:
        yield families.gauge("quorumq_in_sync_replicas", "copies within haMaxGapNotInSync, the master's included",
                             broker.in_sync_replicas())
        lag_bytes, lag_seconds = _replication_lag(broker)
        slave = ["slave_id"]
        yield families.gauge("quorumq_replication_lag_bytes", "commit-log bytes a slave has not acked", lag_bytes,
                             slave)
        yield families.gauge("quorumq_replication_lag_seconds", "age of the oldest message a slave has not "
                             "acked", lag_seconds, slave)
    if broker.slave is not None:
        known = broker.slave.master_max_offset
        yield families.gauge("quorumq_slave_behind_bytes", "bytes this slave lacks of its master's log, as last "
                             "heard", max(known - store.max_offset, 0) if known is not None else 0)


def _replication_lag(broker) -> tuple[list, list]:
    store, now_ms = broker.store, broker.clock.now_ms()
    lag_bytes: list[tuple[str, int]] = []
    lag_seconds: list[tuple[str, float]] = []
    for slave_id, progress in sorted(broker.replication.tracker.slaves.items()):
        acked = progress.ack_offset if progress.ack_offset is not None else progress.start_offset
        behind = max(store.max_offset - acked, 0)
        stored_ms = store.store_timestamp_at(acked) if behind else None
        lag_bytes.append((str(slave_id), behind))
        lag_seconds.append((str(slave_id), max(now_ms - stored_ms, 0) / 1000 if stored_ms is not None else 0.0))
    return lag_bytes, lag_seconds


def read_size(messages: Sequence) -> int:
    """Bytes of what a read returns: whole records (raw reads) or stored messages."""
    return sum(len(message) if isinstance(message, bytes) else message.store_size for message in messages)
