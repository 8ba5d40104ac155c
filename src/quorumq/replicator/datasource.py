"""A Spark Structured Streaming source and sink for quorumq, on PySpark's Python Data Source API.

Register once per session with `register(spark)`; then `spark.readStream.format("quorumq")` reads
topics by queue offset and `df.writeStream.format("quorumq")` sends rows to a cluster.

Source: one Spark task per queue with new data, never a queue split across tasks, so each queue's
order holds. Its offset is per queue (core.replicator.encode_offsets). Rows stay raw: the body is
bytes and the user properties are the RocketMQ encoding `name\\x01value\\x02...` (Spark SQL reads
them with `str_to_map(properties, '\\u0002', '\\u0001')`); a FIFO message's group is its own
column, `message_group`. With the option records=true the rows are whole records instead
(RECORDS_SCHEMA): each message's commit-log record as pulled, not decoded.

Sink: rows that carry a source position (the source's `cluster`, `broker`, `queue_offset` columns)
are replicated: stamped with their birth cluster and source position, dropped when they would go
back to their birth cluster, and sent in order to the mapped queue (a whole record goes as is, only
its properties stamped and its queue id set, with SendBatch); the task succeeds only once the
destination answered SEND_OK for every row (or the failure policy took the rest). Other rows
(`topic`, `body`, and optionally `queue_id`, `tag`, `keys`, `message_group`, `properties`) are simply
sent.

Both sign every call as the user of the options `accessKey` and `secretKey` when given. Options
travel to the tasks inside the pickled reader or writer; the secret is never in a repr (Credentials)
and Spark redacts the values of options named like these (spark.redaction.regex) where it shows them.
"""

import importlib
import json
import logging
import time
from array import array
from bisect import bisect_left
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows

from quorumq import limits
from quorumq.client import FOUND, ClientError, Message, ReceivedMessage, SendResult
from quorumq.client.consumer import PulledRecords, decode_records
from quorumq.client.producer import batches, new_message_id
from quorumq.core import codec
from quorumq.core import properties as message_properties
from quorumq.core import replicator as plan
from quorumq.core.auth import Credentials, credentials_of
from quorumq.core.codec import decode_properties, encode_properties
from quorumq.core.replicator import QueueKey
from quorumq.errors import Error, QuorumqError
from quorumq.replicator import clients
from quorumq.store.atomic_file import write_atomically

log = logging.getLogger("quorumq.replicator")

FORMAT = "quorumq"
SCHEMA = ("cluster STRING, topic STRING, broker STRING, queue_id INT, queue_index INT, queue_offset BIGINT, "
          "message_id STRING, tag STRING, keys STRING, message_group STRING, properties STRING, body BINARY, "
          "born_timestamp BIGINT, store_timestamp BIGINT")
ARROW_SCHEMA = pa.schema([
    ("cluster", pa.string()), ("topic", pa.string()), ("broker", pa.string()), ("queue_id", pa.int32()),
    ("queue_index", pa.int32()), ("queue_offset", pa.int64()), ("message_id", pa.string()), ("tag", pa.string()),
    ("keys", pa.string()), ("message_group", pa.string()), ("properties", pa.string()), ("body", pa.binary()),
    ("born_timestamp", pa.int64()), ("store_timestamp", pa.int64()),
])
# With the option records=true: each message as its whole record, not decoded (core/codec.py).
RECORDS_SCHEMA = "cluster STRING, topic STRING, broker STRING, queue_id INT, queue_index INT, queue_offset BIGINT, " \
                 "record BINARY"
RECORDS_ARROW_SCHEMA = pa.schema([
    ("cluster", pa.string()), ("topic", pa.string()), ("broker", pa.string()), ("queue_id", pa.int32()),
    ("queue_index", pa.int32()), ("queue_offset", pa.int64()), ("record", pa.binary()),
])


def register(spark: Any) -> None:
    spark.dataSource.register(QuorumqDataSource)


def _required(options: Any, name: str) -> str:
    value = options.get(name)  # options is case-insensitive: keys are lower-cased
    if not value:
        raise QuorumqError(Error.CONFIG_INVALID, f"option {name} is required by the {FORMAT} format")
    return value


def _credentials(options: Any) -> Credentials | None:
    return credentials_of(options.get("accessKey", ""), options.get("secretKey", ""),
                          f"options accessKey and secretKey of the {FORMAT} format")


def _flag(options: Any, name: str) -> bool:
    value = options.get(name, "false").lower()
    if value not in ("true", "false"):
        raise QuorumqError(Error.CONFIG_INVALID, f"option {name}={value!r} is true or false")
    return value == "true"


def _positive_int(options: Any, name: str, default: int | None) -> int | None:
    value = options.get(name)
    if value is None:
        return default
    if not str(value).isdigit() or int(value) <= 0:
        raise QuorumqError(Error.CONFIG_INVALID, f"option {name}={value!r} must be a positive integer")
    return int(value)


class QuorumqDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        return RECORDS_SCHEMA if _flag(self.options, "records") else SCHEMA

    def streamReader(self, schema: Any) -> "QueueReader":
        return QueueReader(SourceOptions.parse(self.options))

    def streamWriter(self, schema: Any, overwrite: bool) -> "QueueWriter":
        return QueueWriter(SinkOptions.parse(self.options))


# The source.

@dataclass(frozen=True)
class SourceOptions:
    access_point: str
    topics: tuple[str, ...]
    tag_filters: dict[str, str]  # topic -> tag expression ("*" when absent)
    starting: str  # earliest or latest
    max_records_per_trigger: int | None
    max_records_per_queue: int | None
    credentials: Credentials | None = None
    records: bool = False  # RECORDS_SCHEMA: whole records, not decoded
    max_partitions: int | None = None  # the tasks a micro-batch's queues are packed into (None: one a queue)

    @classmethod
    def parse(cls, options: Any) -> "SourceOptions":
        access_point = _required(options, "accessPoint")
        topics = tuple(topic.strip() for topic in _required(options, "topics").split(",") if topic.strip())
        tag_filters = json.loads(options.get("tagFilters") or "{}")
        starting = options.get("startingOffsets", "latest")
        if starting not in ("earliest", "latest"):
            raise QuorumqError(Error.CONFIG_INVALID, f"startingOffsets={starting!r} is earliest or latest")
        return cls(access_point, topics, tag_filters, starting,
                   _positive_int(options, "maxRecordsPerTrigger", None),
                   _positive_int(options, "maxRecordsPerQueue", None), _credentials(options),
                   _flag(options, "records"), _positive_int(options, "maxPartitions", None))


@dataclass(frozen=True)
class QueueSpan:
    queue: QueueKey
    queue_index: int  # its place in its topic's route
    start: int
    end: int


class QueuePartition(InputPartition):
    """A task's queues, read one after another."""

    def __init__(self, spans: Sequence[QueueSpan]) -> None:
        super().__init__(None)
        self.spans = tuple(spans)


class QueueReader(DataSourceStreamReader):
    """Planning (offsets, partitions) runs in one long-lived driver-side process; `read` runs in
    executors on a pickled copy, so clients are looked up per process and never pickled."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._ranges_at = 0.0
        self._ranges: dict[QueueKey, tuple[int, int]] = {}  # queue -> (min offset, end offset)
        self._lost_until: dict[QueueKey, int] = {}  # queue -> the end of the last data loss logged

    def __getstate__(self) -> dict:
        return {"options": self.options, "_ranges_at": 0.0, "_ranges": {}, "_lost_until": {}}

    def initialOffset(self) -> dict:
        ranges = self._queue_ranges()
        position = 0 if self.options.starting == "earliest" else 1
        return plan.encode_offsets({queue: offsets[position] for queue, offsets in ranges.items()})

    def getDefaultReadLimit(self) -> ReadLimit:
        rows = self.options.max_records_per_trigger
        return ReadAllAvailable() if rows is None else ReadMaxRows(rows)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        start_offsets = plan.decode_offsets(start)
        ranges = self._queue_ranges()
        min_offsets = {queue: min_offset for queue, (min_offset, _) in ranges.items()}
        known, lost = plan.resume_offsets(start_offsets, min_offsets)  # new queues join, read from the next batch
        for queue, (first, end) in lost.items():
            if self._lost_until.get(queue, -1) < end:  # once per loss, however often Spark asks from that start
                log.warning("data loss: %s lost offsets %d..%d to retention before they were replicated",
                            queue, first, end - 1)
                self._lost_until[queue] = end
        available = {queue: end for queue, (_, end) in ranges.items() if queue in start_offsets}
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        ends = plan.admit({q: known[q] for q in available}, available, max_rows,
                          self.options.max_records_per_queue)
        return plan.encode_offsets({**known, **ends})

    def reportLatestOffset(self) -> dict | None:
        if not self._ranges:
            return None
        return plan.encode_offsets({queue: end for queue, (_, end) in self._ranges.items()})

    def partitions(self, start: dict, end: dict) -> Sequence[QueuePartition]:
        start_offsets, end_offsets = plan.decode_offsets(start), plan.decode_offsets(end)
        indexes = _route_indexes(end_offsets)
        rows = {queue: end_offsets[queue] - start_offsets[queue] for queue in end_offsets
                if queue in start_offsets and end_offsets[queue] > start_offsets[queue]}
        return [QueuePartition([QueueSpan(queue, indexes[queue], start_offsets[queue], end_offsets[queue])
                                for queue in part])
                for part in plan.pack(rows, self.options.max_partitions)]

    def read(self, partition: QueuePartition) -> Iterator[pa.RecordBatch]:
        for span in partition.spans:
            yield from self._read_span(span)

    def _read_span(self, span: QueueSpan) -> Iterator[pa.RecordBatch]:
        queue, end = span.queue, span.end
        consumer = clients.consumer(self.options.access_point, self.options.credentials)
        tags = self.options.tag_filters.get(queue.topic, "*")
        cluster = clients.cluster_name(self.options.access_point, self.options.credentials)
        offset = span.start
        while offset < end:
            count = min(limits.REPLICATOR_PULL_BATCH, end - offset)
            batch: pa.RecordBatch | None = None
            if self.options.records:
                pulled = consumer.pull_records(queue.topic, queue.queue_id, offset, count, broker_name=queue.broker,
                                               tag_expression=tags)
                status, next_offset = pulled.status, pulled.next_offset
                if status == FOUND:
                    batch = _records_batch(cluster, queue, span.queue_index, pulled, end)
            else:
                result = consumer.pull(queue.topic, queue.queue_id, offset, count, broker_name=queue.broker,
                                       tag_expression=tags)
                status, next_offset = result.status, result.next_offset
                messages = [m for m in result.messages if m.queue_offset < end] if status == FOUND else []
                if messages:
                    batch = _record_batch(cluster, span.queue_index, messages)
            if next_offset <= offset:
                raise QuorumqError(Error.INTERNAL_ERROR, f"pull of {queue} at {offset} made no progress ({status})")
            if batch is not None:
                yield batch
            offset = next_offset

    def _queue_ranges(self) -> dict[QueueKey, tuple[int, int]]:
        """Each readable queue's (min offset, end offset), asked of each broker at most every
        REPLICATOR_END_OFFSETS_CACHE_S: Spark asks for the latest offset often while idle."""
        if clients.clock().monotonic() - self._ranges_at < limits.REPLICATOR_END_OFFSETS_CACHE_S:
            return self._ranges
        admin = clients.admin(self.options.access_point, self.options.credentials)
        ranges = {}
        for topic in self.options.topics:
            try:
                route = admin.route(topic)
            except ClientError as error:
                if error.name != "TOPIC_NOT_FOUND":
                    raise
                continue  # not created yet: its queues join when it is
            for broker in route.brokers:
                try:
                    progress = admin.queue_progress(broker.addresses[broker.serving_id], clients.PULL_GROUP, topic)
                except ClientError as error:
                    if error.name != "TOPIC_NOT_FOUND":  # a route of brokers that would auto-create it
                        raise
                    continue
                for queue in progress.queues:
                    ranges[QueueKey(topic, broker.broker_name, queue.queue_id)] = (queue.min_offset, queue.max_offset)
        self._ranges, self._ranges_at = ranges, clients.clock().monotonic()
        return ranges


def _route_indexes(queues: Iterable[QueueKey]) -> dict[QueueKey, int]:
    """Each queue's index in its topic's route, ordered by broker name and queue id."""
    by_topic: dict[str, list[QueueKey]] = {}
    for queue in sorted(queues):
        by_topic.setdefault(queue.topic, []).append(queue)
    return {queue: index for topic_queues in by_topic.values() for index, queue in enumerate(topic_queues)}


def _record_batch(cluster: str, queue_index: int, messages: list[ReceivedMessage]) -> pa.RecordBatch:
    count = len(messages)
    first = messages[0]
    return pa.RecordBatch.from_arrays([
        pa.array([cluster] * count, pa.string()),
        pa.array([first.topic] * count, pa.string()),
        pa.array([first.broker_name] * count, pa.string()),
        pa.array([first.queue_id] * count, pa.int32()),
        pa.array([queue_index] * count, pa.int32()),
        pa.array([m.queue_offset for m in messages], pa.int64()),
        pa.array([m.message_id for m in messages], pa.string()),
        pa.array([m.tag or None for m in messages], pa.string()),
        pa.array([" ".join(m.keys) or None for m in messages], pa.string()),
        pa.array([m.message_group for m in messages], pa.string()),
        pa.array([encode_properties(m.properties).decode() for m in messages], pa.string()),
        pa.array([m.body for m in messages], pa.binary()),
        pa.array([m.born_timestamp_ms for m in messages], pa.int64()),
        pa.array([m.store_timestamp_ms for m in messages], pa.int64()),
    ], schema=ARROW_SCHEMA)


def _records_batch(cluster: str, queue: QueueKey, queue_index: int, pulled: PulledRecords,
                   end: int) -> pa.RecordBatch | None:
    """The pulled records below the queue offset `end` as one Arrow batch: the binary column is
    the pulled bytes themselves, cut by the records' starts (no copy per record)."""
    starts = pulled.starts
    offsets = [codec.queue_offset_of(pulled.records, start) for start in starts[:-1]]
    count = bisect_left(offsets, end)  # records at or past `end` belong to a later batch
    if count == 0:
        return None
    records = pa.Array.from_buffers(pa.binary(), count, [None, pa.py_buffer(array("i", starts[:count + 1])),
                                                         pa.py_buffer(pulled.records)])
    return pa.RecordBatch.from_arrays([
        pa.array([cluster] * count, pa.string()), pa.array([queue.topic] * count, pa.string()),
        pa.array([queue.broker] * count, pa.string()), pa.array([queue.queue_id] * count, pa.int32()),
        pa.array([queue_index] * count, pa.int32()), pa.array(offsets[:count], pa.int64()), records,
    ], schema=RECORDS_ARROW_SCHEMA)


# The sink.

@dataclass(frozen=True)
class SinkOptions:
    access_point: str
    cluster: str | None  # the destination's brokerClusterName for the loop check, asked when absent
    on_failure: str  # core.replicator.parse_failure_policy
    dedupe: bool
    offset_sync_topic: str | None  # where the driver writes each batch's offset syncs on the destination
    metrics_path: str | None  # a JSON file of running totals the driver updates after each batch
    credentials: Credentials | None = None

    @classmethod
    def parse(cls, options: Any) -> "SinkOptions":
        dedupe = options.get("dedupe", "false").lower()
        if dedupe not in ("true", "false"):
            raise QuorumqError(Error.CONFIG_INVALID, f"option dedupe={dedupe!r} is true or false")
        return cls(_required(options, "accessPoint"), options.get("cluster"),
                   plan.parse_failure_policy(options.get("onFailure", "fail")), dedupe == "true",
                   options.get("offsetSyncTopic"), options.get("metricsPath"), _credentials(options))


@dataclass
class QueueReport:
    """What one task did for one source queue (or, for plain rows, one destination queue)."""
    topic: str
    source_cluster: str | None  # None for plain rows
    source_broker: str | None
    source_queue_id: int | None
    broker: str
    queue_id: int
    written: int = 0
    filtered: int = 0  # would have looped back to their birth cluster
    deduped: int = 0  # a replayed batch had written them already
    dismissed: int = 0
    handed: int = 0  # given to the user's failure function
    syncs: list[tuple[int, int]] = field(default_factory=list)  # (source offset, destination offset)
    latency_ms_max: int = 0
    latency_ms_total: int = 0


@dataclass
class BatchReport(WriterCommitMessage):
    queues: list[QueueReport]


@dataclass(frozen=True)
class FailedRecord:
    """A record the destination did not store after bounded retries, as the failure policy sees it."""
    topic: str
    source_broker: str | None
    source_queue_id: int | None
    source_offset: int | None
    message: Message
    status: str
    detail: str
    target: str  # the destination's access point, e.g. for a dead-letter topic there
    credentials: Credentials | None  # what the replicator signs with there


@dataclass
class _QueueRows:
    topic: str
    source: QueueKey | None  # None for plain rows
    source_cluster: str | None
    queue_index: int
    queue_id: int | None
    source_queue: str = ""  # the SOURCE_QUEUE property of its messages, made once per queue
    messages: list[Message] = field(default_factory=list)
    records: list[bytes] = field(default_factory=list)  # rows of RECORDS_SCHEMA: whole records, not messages
    births: list[str] = field(default_factory=list)  # each record's birth cluster
    source_offsets: list[int] = field(default_factory=list)
    store_timestamps: list[int] = field(default_factory=list)
    filtered: int = 0


class QueueWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> BatchReport:
        reports = []
        for rows in self._rows_by_queue(iterator):
            reports.append(self._write_queue(rows))
        return BatchReport(reports)

    def commit(self, messages: list[BatchReport | None], batchId: int) -> None:
        reports = [report for message in messages if message for report in message.queues]
        if self.options.offset_sync_topic and any(report.syncs for report in reports):
            record = {"batch": batchId, "queues": [
                {"topic": r.topic, "sourceCluster": r.source_cluster, "sourceBroker": r.source_broker,
                 "sourceQueueId": r.source_queue_id, "broker": r.broker, "queueId": r.queue_id, "syncs": r.syncs}
                for r in reports if r.syncs]}
            clients.send_json(self.options.access_point, self.options.credentials, self.options.offset_sync_topic,
                              record, f"batch-{batchId}")
        if self.options.metrics_path:
            add_metrics(self.options.metrics_path, batchId, reports)

    def abort(self, messages: list[BatchReport | None], batchId: int) -> None:
        log.warning("batch %d aborted (Spark's ERROR \"Data source write support ... is aborting\" above): a task "
                    "failed or the query stopped mid-batch; nothing is lost, the batch is replayed at the next "
                    "start (what it sent already is sent again, or skipped with --dedupe)", batchId)

    def _destination_cluster(self) -> str:
        return self.options.cluster or clients.cluster_name(self.options.access_point, self.options.credentials)

    def _rows_by_queue(self, iterator: Iterator[pa.RecordBatch]) -> list[_QueueRows]:
        """The task's rows as messages, grouped by queue in their order; replicated rows are
        stamped with their source, and those that would loop back are counted and dropped."""
        groups: dict[tuple, _QueueRows] = {}
        destination_cluster = None
        for batch in iterator:
            columns = {name: batch.column(name).to_pylist() for name in batch.schema.names}
            count = batch.num_rows
            replicated = "queue_offset" in columns and "cluster" in columns and "broker" in columns
            if replicated and destination_cluster is None:
                destination_cluster = self._destination_cluster()
            if replicated and "record" in columns:
                _group_records(columns, groups, destination_cluster or "")
                continue
            nothing = [None] * count
            queue_ids, tags, keys, message_groups = (columns.get(name, nothing)
                                                     for name in ("queue_id", "tag", "keys", "message_group"))
            properties = columns.get("properties", nothing)
            for row in range(count):
                topic = columns["topic"][row]
                props = decode_properties(properties[row].encode()) if properties[row] else {}
                if replicated:
                    group = _source_group(groups, columns, row)
                    cluster = group.source_cluster
                    if plan.loops_back(props, cluster, destination_cluster):
                        group.filtered += 1
                        continue
                    offset = columns["queue_offset"][row]
                    store_timestamp = columns.get("store_timestamp", nothing)[row] or 0
                    props[plan.SOURCE_CLUSTER] = plan.birth_cluster(props, cluster)
                    props[plan.SOURCE_QUEUE] = group.source_queue
                    props[plan.SOURCE_OFFSET] = str(offset)
                    props[plan.SOURCE_MESSAGE_ID] = columns.get("message_id", nothing)[row] or ""
                    props[plan.SOURCE_STORE_TIMESTAMP] = str(store_timestamp)
                    group.source_offsets.append(offset)
                    group.store_timestamps.append(store_timestamp)
                else:
                    key = (topic, queue_ids[row])
                    group = groups.get(key)
                    if group is None:
                        group = groups[key] = _QueueRows(topic, None, None, 0, queue_ids[row])
                group.messages.append(Message(columns["body"][row], tags[row], (keys[row] or "").split(), props,
                                              message_group=message_groups[row]))
        return list(groups.values())

    def _write_queue(self, rows: _QueueRows) -> QueueReport:
        """Send one queue's rows in order, by the failure policy; a replayed batch's rows the
        destination holds already are skipped with dedupe."""
        destination = self._destination_queue(rows)
        broker, queue_id = destination if destination else ("", -1)
        report = QueueReport(rows.topic, rows.source_cluster, rows.source.broker if rows.source else None,
                             rows.source.queue_id if rows.source else None, broker, queue_id, filtered=rows.filtered)
        start = 0
        if self.options.dedupe and rows.source and rows.source_offsets:
            start = plan.first_unwritten(rows.source_offsets, self._last_written(rows, broker, queue_id))
            report.deduped = start
        failed: list[FailedRecord] = []
        pairs: list[tuple[int, int]] = []
        producer = clients.producer(self.options.access_point, self.options.credentials)
        fail_fast = self.options.on_failure == "fail"  # later records would only be sent again on replay
        position = start
        send_batch: Callable[[Sequence[Any]], list[SendResult]]
        if rows.records:
            items: Sequence[Any] = _stamped(rows, start, queue_id)
            chunks = batches(items, limits.BATCH_MESSAGES_MAX, limits.BATCH_BYTES_MAX, lambda item: len(item[0]))
            send_batch = lambda chunk: producer.send_records(  # noqa: E731
                rows.topic, b"".join(record for record, _ in chunk), [id_ for _, id_ in chunk], queue_id,
                broker or None)
        else:
            chunks = batches(rows.messages[start:], limits.BATCH_MESSAGES_MAX, limits.BATCH_BYTES_MAX)
            send_batch = lambda chunk: producer.send_batch(  # noqa: E731
                rows.topic, chunk, destination[1] if destination else None, broker or None)
        for chunk in chunks:
            results = _send_chunk(send_batch, destination, chunk, stop_at_failure=fail_fast)
            now_ms = clients.clock().now_ms()
            for offset, (item, result) in enumerate(zip(chunk, results), start=position):
                if result.ok:
                    report.written += 1
                    if rows.source:
                        pairs.append((rows.source_offsets[offset], result.queue_offset))
                        latency = now_ms - rows.store_timestamps[offset]
                        report.latency_ms_total += latency
                        report.latency_ms_max = max(report.latency_ms_max, latency)
                else:
                    message = _message_of(item[0]) if rows.records else item
                    failed.append(FailedRecord(rows.topic, report.source_broker, report.source_queue_id,
                                               rows.source_offsets[offset] if rows.source else None, message,
                                               result.status, result.detail, self.options.access_point,
                                               self.options.credentials))
            position += len(chunk)
            if failed and fail_fast:
                break
        if failed:
            self._apply_policy(failed, report)
        report.syncs = [(sync.source_offset, sync.destination_offset) for sync in plan.sync_points(pairs)]
        return report

    def _destination_queue(self, rows: _QueueRows) -> tuple[str, int] | None:
        """The destination (broker, queue id) of replicated rows; plain rows name a queue id or
        leave the choice to the producer (None)."""
        if rows.source is None:
            return None if rows.queue_id is None else ("", rows.queue_id)
        queues = [(q.broker_name, q.queue_id)
                  for q in clients.consumer(self.options.access_point, self.options.credentials).queues(rows.topic)]
        return plan.destination_queue(rows.source, rows.queue_index, queues)

    def _last_written(self, rows: _QueueRows, broker: str, queue_id: int) -> int | None:
        """The largest offset of this source queue found in the destination queue's tail, which a
        replay of this batch wrote already; None when the tail holds nothing of this batch. The tail
        read is as long as the batch, so it finds everything when the replicator is the queue's
        only writer."""
        consumer = clients.consumer(self.options.access_point, self.options.credentials)
        source_queue = rows.source_queue
        end = consumer.query_offset(rows.topic, queue_id, "END", broker_name=broker or None)

        def ours(message: ReceivedMessage) -> int | None:
            if message.properties.get(plan.SOURCE_QUEUE) != source_queue:
                return None
            return int(message.properties[plan.SOURCE_OFFSET])

        if end == 0:
            return None
        [last] = consumer.pull(rows.topic, queue_id, end - 1, 1, broker_name=broker or None).messages or [None]
        if last is not None and ours(last) is not None and ours(last) < rows.source_offsets[0]:
            return None  # the common case: the tail ends before this batch
        found = None
        offset = max(0, end - min(len(rows.source_offsets), limits.REPLICATOR_DEDUPE_SCAN_MAX))
        while offset < end:
            result = consumer.pull(rows.topic, queue_id, offset, limits.REPLICATOR_PULL_BATCH,
                                   broker_name=broker or None)
            for message in result.messages:
                source_offset = ours(message)
                if source_offset is not None:
                    found = source_offset if found is None else max(found, source_offset)
            if result.next_offset <= offset:
                break
            offset = result.next_offset
        return found

    def _apply_policy(self, failed: list[FailedRecord], report: QueueReport) -> None:
        policy = self.options.on_failure
        first = failed[0]
        summary = (f"{len(failed)} records of {first.topic} not stored on the destination "
                   f"(first: source offset {first.source_offset}, {first.status}: {first.detail})")
        if policy == "fail":
            raise QuorumqError(Error.REPLICATION_FAILED, summary)
        if policy == "dismiss":
            log.warning("dismissed %s", summary)
            report.dismissed += len(failed)
            return
        _failure_function(policy)(failed)
        report.handed += len(failed)


def _source_group(groups: dict[tuple, _QueueRows], columns: dict[str, list], row: int) -> _QueueRows:
    """The rows of the source queue of a replicated row, made at its first row."""
    topic, queue_id = columns["topic"][row], columns["queue_id"][row]
    source = QueueKey(topic, columns["broker"][row], queue_id)
    group = groups.get(source)
    if group is None:
        index = columns.get("queue_index", columns["queue_id"])[row]
        cluster = columns["cluster"][row]
        group = groups[source] = _QueueRows(topic, source, cluster, index, queue_id,
                                            json.dumps([cluster, topic, source.broker, source.queue_id]))
    return group


def _group_records(columns: dict[str, list], groups: dict[tuple, _QueueRows], destination_cluster: str) -> None:
    """Rows of RECORDS_SCHEMA by source queue; those that would loop back are counted and dropped.
    Each record's birth cluster and store time are read in its bytes, nothing else is decoded."""
    offsets = columns["queue_offset"]
    for row, record in enumerate(columns["record"]):
        group = _source_group(groups, columns, row)
        birth = codec.message_property(record, 0, plan.SOURCE_CLUSTER) or group.source_cluster or ""
        if birth == destination_cluster:
            group.filtered += 1
            continue
        group.records.append(record)
        group.births.append(birth)
        group.source_offsets.append(offsets[row])
        group.store_timestamps.append(codec.store_timestamp_of(record) or 0)


def _stamped(rows: _QueueRows, start: int, queue_id: int) -> list[tuple[bytes, str]]:
    """(record, its new message id) of the rows from `start` on, each record copied for `queue_id`
    with the replicator's properties (core/codec.py with_properties): its birth cluster, its source
    queue, offset, message id and store time; the destination's message id is a new one."""
    stamped = []
    for index in range(start, len(rows.records)):
        record, message_id = rows.records[index], new_message_id()
        try:
            stamped.append((codec.with_properties(record, queue_id, {
                plan.SOURCE_CLUSTER: rows.births[index], plan.SOURCE_QUEUE: rows.source_queue,
                plan.SOURCE_OFFSET: str(rows.source_offsets[index]),
                plan.SOURCE_MESSAGE_ID: codec.message_property(record, 0, message_properties.MESSAGE_ID),
                plan.SOURCE_STORE_TIMESTAMP: str(rows.store_timestamps[index]),
                message_properties.MESSAGE_ID: message_id}), message_id))
        except ValueError as error:  # the stamp would take its properties past what a record holds
            raise QuorumqError(Error.REPLICATION_FAILED, f"{rows.source} offset {rows.source_offsets[index]}: "
                                                         f"{error}") from error
    return stamped


def _message_of(record: bytes) -> Message:
    """A stamped record as the message the failure policy sees."""
    [received] = decode_records(record, "", "")
    return Message(received.body, received.tag or None, received.keys, received.properties,
                   message_id=received.message_id, message_group=received.message_group)


def _failure_function(policy: str) -> Callable[[list[FailedRecord]], Any]:
    module, _, function = policy.partition(":")
    return getattr(importlib.import_module(module), function)


def _retriable(status: str) -> bool:
    """Whether a failed send may succeed when sent again: send statuses and transport failures may,
    a record the destination refuses by rule (catalogue errors marked not retriable) will not."""
    error = Error.__members__.get(status)
    return error is None or error.retriable


def _send_one_by_one(send_batch: Callable[[Sequence[Any]], list[SendResult]], destination: tuple[str, int] | None,
                     chunk: Sequence[Any], stop_at_failure: bool) -> list[SendResult]:
    """The results of the messages sent, in order; with stop_at_failure none after the first failure."""
    results = []
    for message in chunk:
        results += _send_chunk(send_batch, destination, [message], stop_at_failure)
        if stop_at_failure and not results[-1].ok:
            break
    return results


def _send_chunk(send_batch: Callable[[Sequence[Any]], list[SendResult]], destination: tuple[str, int] | None,
                chunk: Sequence[Any], stop_at_failure: bool) -> list[SendResult]:
    """One request's worth of messages or stamped records, sent by `send_batch` to `destination`,
    again with backoff while it fails in a way that may pass; a chunk refused as a whole by rule is
    sent one by one, so that only the records at fault fail (and, with stop_at_failure, nothing
    after them is sent). Success is SEND_OK only."""
    broker, queue_id = (destination[0] or None, destination[1]) if destination else (None, None)
    backoff_s = 0.05
    for attempt in range(limits.REPLICATOR_SEND_ATTEMPTS):
        try:
            results = send_batch(chunk)
        except ClientError as error:
            results = [SendResult(error.name, "", queue_id or -1, -1, broker or "", error.detail)] * len(chunk)
        failed = [result for result in results if not result.ok]
        if not failed or len(failed) < len(results):  # all stored, or some refused by rule alone
            return results
        if not _retriable(failed[0].status):
            if len(chunk) == 1:
                return results
            return _send_one_by_one(send_batch, destination, chunk, stop_at_failure)
        if attempt + 1 < limits.REPLICATOR_SEND_ATTEMPTS:
            time.sleep(backoff_s)
            backoff_s = min(2 * backoff_s, limits.REPLICATOR_SEND_BACKOFF_S_MAX)
    return results


METRIC_COUNTERS = ("written", "filtered", "deduped", "dismissed", "handed")


def add_metrics(path: str, batch_id: int, reports: list[QueueReport]) -> None:
    """Add a committed batch to the running totals at `path`; a batch counted already (its commit
    ran again after a restart) is not counted twice."""
    file = Path(path)
    totals = json.loads(file.read_text()) if file.exists() else {"batch": -1, **{name: 0 for name in METRIC_COUNTERS}}
    if batch_id <= totals["batch"]:
        return
    for name in METRIC_COUNTERS:
        totals[name] += sum(getattr(report, name) for report in reports)
    written = sum(report.written for report in reports if report.source_broker is not None)
    totals["batch"] = batch_id
    totals["latency_ms_max"] = max((report.latency_ms_max for report in reports), default=0)
    totals["latency_ms_mean"] = (sum(report.latency_ms_total for report in reports) / written) if written else None
    write_atomically(file, json.dumps(totals).encode())
