"""Helpers for the replicator tests: producing on one cluster, reading back what the other holds,
and a failure function the Spark workers import (they find this folder through PYTHONPATH)."""

import json
import os
import sys
import uuid
from pathlib import Path

from quorumq.client import Blocking, Credentials, Message, Producer, PullConsumer
from quorumq.core import replicator as plan
from quorumq.replicator.datasource import QueueReader, QueueWriter, SinkOptions, SourceOptions

DEAD_LETTER_TOPIC = "DLQ_replicator"
TESTS_DIR = Path(__file__).resolve().parent


def new_topic() -> str:
    return f"R{uuid.uuid4().hex[:10]}"


def worker_environment() -> None:
    """Spark's Python workers run this interpreter and can import this module."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    paths = [str(TESTS_DIR), os.environ.get("PYTHONPATH", "")]
    os.environ["PYTHONPATH"] = os.pathsep.join(path for path in paths if path)


def produce(cluster: dict, topic: str, per_queue: int, queues: int, body_bytes: int = 16, tag: str = "t",
            start: int = 0, first_queue: int = 0) -> None:
    """per_queue messages to each queue; bodies name queue and index, so copies can be checked."""
    with Blocking(Producer, cluster["access_point"]) as producer:
        for queue in range(first_queue, first_queue + queues):
            messages = [Message(f"{cluster['cluster']}-{queue}-{index}".encode().ljust(body_bytes, b"."), tag=tag,
                                keys=(f"k{index}",), properties={"index": str(index)})
                        for index in range(start, start + per_queue)]
            assert all(result.ok for result in producer.send_batch(topic, messages, queue_id=queue))


def queue_messages(cluster: dict, topic: str, queue: int) -> list:
    """Everything a queue holds, in order."""
    with Blocking(PullConsumer, cluster["access_point"], "ReplicatorTest") as consumer:
        messages, offset = [], 0
        end = consumer.query_offset(topic, queue, "END")
        while offset < end:
            result = consumer.pull(topic, queue, offset, 1024)
            messages += result.messages
            offset = result.next_offset
        return messages


def queue_ends(cluster: dict, topic: str, queues: int, credentials: Credentials | None = None) -> list[int]:
    with Blocking(PullConsumer, cluster["access_point"], "ReplicatorTest", credentials=credentials) as consumer:
        return [consumer.query_offset(topic, queue, "END") for queue in range(queues)]


def replicate_once(source: dict, target: dict, topic: str, records: bool = True) -> list:
    """One micro-batch of the replicate job without Spark: the source plans it from the earliest
    offsets and reads each queue (as whole records, or as the documented decoded columns), the sink
    writes each queue's rows, as Spark's tasks would; the sink's reports."""
    reader = QueueReader(SourceOptions(source["access_point"], (topic,), {}, "earliest", None, None, records=records))
    writer = QueueWriter(SinkOptions(target["access_point"], target["cluster"], "fail", False, None, None))
    start = reader.initialOffset()
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    return [writer.write(reader.read(partition)) for partition in reader.partitions(start, end)]


def source_offsets(messages: list) -> list[int]:
    return [int(message.properties[plan.SOURCE_OFFSET]) for message in messages]


def to_dead_letter_topic(records: list) -> None:
    """A failure function for --on-failure: a small note per failed record on the target's DLQ topic."""
    notes = [Message(json.dumps({"topic": r.topic, "queue": r.source_queue_id, "offset": r.source_offset,
                                 "status": r.status}).encode()) for r in records]
    with Blocking(Producer, records[0].target) as producer:
        assert all(result.ok for result in producer.send_batch(DEAD_LETTER_TOPIC, notes, queue_id=0))
