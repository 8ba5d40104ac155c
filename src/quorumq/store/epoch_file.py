"""The epoch file: `storeRoot/epochFileCheckpoint` and its copy `.bak` (core/epochs.py's encoding,
RocketMQ's checkpoint layout: a count line, a crc32 line, then `epoch-start` lines).

A save writes the copy first, then replaces the main file atomically; a load that finds the main
file torn or failing its crc falls back to the copy. An empty cache is saved too (RocketMQ's
CheckpointFile skips an empty list and so keeps stale epochs after a full truncation).
"""

import logging
from pathlib import Path

from quorumq.core.epochs import EpochCache
from quorumq.store.atomic_file import write_atomically

log = logging.getLogger(__name__)

FILE_NAME = "epochFileCheckpoint"


class EpochFile:
    def __init__(self, root: Path) -> None:
        self.path = Path(root) / FILE_NAME
        self.backup = self.path.with_name(FILE_NAME + ".bak")

    def load(self) -> EpochCache:
        """The saved epochs; an empty cache when neither file exists."""
        for path in (self.path, self.backup):
            if not path.exists():
                continue
            try:
                return EpochCache.decode(path.read_bytes())
            except ValueError as exc:
                log.warning("%s is unreadable (%s); trying its copy", path, exc)
        return EpochCache()

    def save(self, cache: EpochCache) -> None:
        data = cache.encode()
        write_atomically(self.backup, data)
        write_atomically(self.path, data)
