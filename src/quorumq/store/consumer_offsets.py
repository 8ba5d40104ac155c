"""Consumer progress, group -> topic -> queue id -> next offset, kept in `<root>/config/`.

The broker sets offsets as consumers commit and calls `persist` on a timer
(flushConsumerOffsetInterval) and at shutdown; the file is replaced atomically.
"""

import json
from pathlib import Path

from quorumq.errors import Error, QuorumqError, write_error
from quorumq.store.atomic_file import write_atomically

FILE_NAME = "consumerOffset.json"


class ConsumerOffsets:
    def __init__(self, root: Path) -> None:
        self.path = Path(root) / "config" / FILE_NAME
        self._offsets: dict[str, dict[str, dict[int, int]]] = {}
        self._changed = False

    def load(self) -> None:
        try:
            data = json.loads(self.path.read_bytes())
            self._offsets = {
                group: {topic: {int(queue_id): int(offset) for queue_id, offset in queues.items()}
                        for topic, queues in topics.items()}
                for group, topics in data.items()}
        except FileNotFoundError:
            self._offsets = {}
        except (ValueError, AttributeError, TypeError) as exc:
            raise QuorumqError(Error.STORE_CORRUPTED,
                               f"unreadable consumer offsets {self.path}: {exc}") from None
        self._changed = False

    def get(self, group: str, topic: str, queue_id: int) -> int | None:
        return self._offsets.get(group, {}).get(topic, {}).get(queue_id)

    def set(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        if offset < 0:
            raise QuorumqError(Error.ILLEGAL_OFFSET, f"negative consumer offset {offset}")
        queues = self._offsets.setdefault(group, {}).setdefault(topic, {})
        if queues.get(queue_id) != offset:
            queues[queue_id] = offset
            self._changed = True

    def items(self) -> list[tuple[str, str, int, int]]:
        """Every position: (group, topic, queue id, offset)."""
        return [(group, topic, queue_id, offset) for group, topics in self._offsets.items()
                for topic, queues in topics.items() for queue_id, offset in queues.items()]

    def topics(self, group: str) -> list[str]:
        return sorted(self._offsets.get(group, {}))

    def delete_topic(self, topic: str) -> None:
        for topics in self._offsets.values():
            if topics.pop(topic, None) is not None:
                self._changed = True

    def persist(self) -> bool:
        """Write the file if anything changed since the last write; returns whether it wrote."""
        if not self._changed:
            return False
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_atomically(self.path, json.dumps(self._offsets, sort_keys=True, indent=1).encode())
        except OSError as exc:  # kept as changed: the next persist tries again
            raise write_error(exc, "consumer offsets not written") from exc
        self._changed = False
        return True
