"""Topic configurations (queue counts and permission) kept in `<root>/config/topics.json`.

Every change is written at once, atomically: topics change rarely and must survive a crash.
"""

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from quorumq import limits
from quorumq.errors import Error, QuorumqError
from quorumq.protocol.constants import PERM_READ_WRITE
from quorumq.store.atomic_file import write_atomically

FILE_NAME = "topics.json"


@dataclass(frozen=True, slots=True)
class TopicConfig:
    name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int = PERM_READ_WRITE

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


class TopicConfigs:
    def __init__(self, root: Path) -> None:
        self.path = Path(root) / "config" / FILE_NAME
        self._topics: dict[str, TopicConfig] = {}

    def load(self) -> None:
        try:
            data = json.loads(self.path.read_bytes())
            self._topics = {name: TopicConfig(**fields) for name, fields in data.items()}
        except FileNotFoundError:
            self._topics = {}
        except (ValueError, AttributeError, TypeError) as exc:
            raise QuorumqError(Error.STORE_CORRUPTED,
                               f"unreadable topic configs {self.path}: {exc}") from None

    def get(self, name: str) -> TopicConfig | None:
        return self._topics.get(name)

    def all(self) -> list[TopicConfig]:
        return [self._topics[name] for name in sorted(self._topics)]

    def put(self, config: TopicConfig) -> None:
        if self._topics.get(config.name) != config:
            if config.name not in self._topics and len(self._topics) >= limits.TOPICS_MAX:
                raise QuorumqError(Error.TOO_MANY_REQUESTS, f"there are already {limits.TOPICS_MAX} topics")
            self._topics[config.name] = config
            self._persist()

    def delete(self, name: str) -> bool:
        if self._topics.pop(name, None) is None:
            return False
        self._persist()
        return True

    def _persist(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = {name: asdict(config) for name, config in sorted(self._topics.items())}
        write_atomically(self.path, json.dumps(data, indent=1).encode())
