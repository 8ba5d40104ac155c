"""Topic configurations (queue counts, permission, message type) kept in `<root>/config/topics.log`.

Every change is on disk before it is answered, appended to the log (store/keyed_log.py): a new
topic costs one small write however many topics there are.
"""

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from quorumq import limits
from quorumq.core.message_types import TopicMessageType
from quorumq.errors import Error, QuorumqError
from quorumq.protocol.constants import PERM_READ_WRITE
from quorumq.store.keyed_log import KeyedLog

FILE_NAME = "topics.log"
LEGACY_FILE_NAME = "topics.json"  # the whole-file form of earlier versions, taken into the log on load


@dataclass(frozen=True, slots=True)
class TopicConfig:
    name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int = PERM_READ_WRITE
    message_type: TopicMessageType = TopicMessageType.NORMAL  # its message.type attribute

    def __post_init__(self) -> None:
        if not 0 < len(self.name.encode()) <= limits.NAME_LENGTH_MAX:
            raise QuorumqError(Error.ILLEGAL_TOPIC,
                               f"topic name must have 1 to {limits.NAME_LENGTH_MAX} bytes")
        for queues in (self.read_queue_nums, self.write_queue_nums):
            if not 0 < queues <= limits.QUEUES_PER_TOPIC_MAX:
                raise QuorumqError(Error.BAD_REQUEST,
                                   f"queue count {queues} outside 1..{limits.QUEUES_PER_TOPIC_MAX}")
        if not 0 <= self.perm <= 7:
            raise QuorumqError(Error.BAD_REQUEST, f"topic permission {self.perm} outside 0..7")


def _topic_config(fields: dict) -> TopicConfig:
    """A config from the log; one written before message types is NORMAL."""
    return TopicConfig(**{**fields, "message_type": TopicMessageType(fields.get("message_type", "NORMAL"))})


def _topic_fields(config: TopicConfig) -> dict[str, Any]:
    return {**asdict(config), "message_type": config.message_type.value}


class TopicConfigs:
    def __init__(self, root: Path) -> None:
        directory = Path(root) / "config"
        self._log = KeyedLog(directory / FILE_NAME, "topic configs", _topic_fields, _topic_config,
                             legacy=directory / LEGACY_FILE_NAME)

    @property
    def path(self) -> Path:
        return self._log.path

    def load(self) -> None:
        self._log.load()

    def get(self, name: str) -> TopicConfig | None:
        return self._log.get(name)

    def all(self) -> list[TopicConfig]:
        entries = self._log.entries
        return [entries[name] for name in sorted(entries)]

    def put(self, config: TopicConfig) -> None:
        if config.name not in self._log and len(self._log) >= limits.TOPICS_MAX:
            raise QuorumqError(Error.TOO_MANY_REQUESTS, f"there are already {limits.TOPICS_MAX} topics")
        self._log.put(config.name, config)

    def adopt(self, configs: list[TopicConfig]) -> bool:
        """A slave's copy of its master's topics, in one write and whatever their number (the
        master kept to TOPICS_MAX); whether anything changed."""
        return self._log.update({config.name: config for config in configs})

    def delete(self, name: str) -> bool:
        return self._log.delete(name)
