"""The final read after healing: every queue of the workload's topic from every replica's store,
opened offline once the cluster has stopped (recovery runs and checks every record's CRC), and the
consumer groups' committed offsets each replica persisted."""

from __future__ import annotations

from pathlib import Path

from quorumq.clock import Clock
from quorumq.store.consumer_offsets import ConsumerOffsets
from quorumq.store.message_store import MessageStore

READ_BATCH = 256
READ_BYTES = 1 << 20


def read_replica(store_dir: Path, topic: str, broker_name: str, segment_bytes: int) -> dict[str, list[tuple[int, str]]]:
    """{"<broker_name>:<queue_id>": [(queue offset, value), ...]} of one replica's store."""
    store = MessageStore(store_dir, segment_bytes=segment_bytes, store_host="offline", clock=Clock())
    report = store.open()
    try:
        # A damaged in-sync replica is itself a finding; reading it would only show a prefix.
        if report.corrupt_offset is not None:
            raise RuntimeError(f"{store_dir}: the commit log is damaged at offset {report.corrupt_offset}: {report}")
        queues = {}
        for queue_id in store.topic_queue_ids(topic):
            found, offset = [], store.queue_min_offset(topic, queue_id)
            while offset < store.queue_max_offset(topic, queue_id):
                result = store.get_messages(topic, queue_id, offset, READ_BATCH, READ_BYTES)
                found += [(message.queue_offset, message.body.decode()) for message in result.messages]
                offset = result.next_offset
            queues[f"{broker_name}:{queue_id}"] = found
        return queues
    finally:
        store.close()


def read_offsets(store_dir: Path, topic: str) -> dict[tuple[str, int], int]:
    """{(group, queue id): committed offset} of the topic, as the replica persisted them."""
    offsets = ConsumerOffsets(store_dir)
    offsets.load()
    return {(group, queue_id): offset for group, name, queue_id, offset in offsets.items() if name == topic}
