"""The storage engine: commit log, consume queues, recovery, flushing, retention, small JSON stores.

Nothing here imports a server module; the broker drives it from its event loop.
"""

from quorumq.core.codec import StoredMessage, tag_hash
from quorumq.store.atomic_file import write_atomically
from quorumq.store.consumer_offsets import ConsumerOffsets
from quorumq.store.flush import Flusher
from quorumq.store.interface import (
    AppendResult,
    GetResult,
    GetStatus,
    MessageIn,
    RecoveryReport,
    Store,
    UnindexedAppend,
)
from quorumq.store.keyed_log import KeyedLog
from quorumq.store.memory import MemoryStore
from quorumq.store.message_store import MessageStore
from quorumq.store.read import walk_queue
from quorumq.store.recovery import Damage, classify_damage
from quorumq.store.retention import segments_to_delete
from quorumq.store.topic_configs import TopicConfig, TopicConfigs

__all__ = [
    "AppendResult", "ConsumerOffsets", "Damage", "Flusher", "GetResult", "GetStatus", "KeyedLog", "MemoryStore",
    "MessageIn", "MessageStore", "RecoveryReport", "Store", "StoredMessage", "TopicConfig",
    "TopicConfigs", "UnindexedAppend", "classify_damage",
    "segments_to_delete", "tag_hash", "walk_queue", "write_atomically",
]
