"""Master epochs of a commit log (RocketMQ's EpochFileCache, spec rocketmq-ha.md 2.9). Pure: the
file lives in store/epoch_file.py.

Each entry says that the master of `epoch` wrote the log from `start_offset` on; an entry ends
where the next begins, and the last one is open. A new master appends its epoch at its log's end;
a slave learns epochs from the frames it receives. When a broker becomes a slave, the last epoch
that it and its master both have, with the same start, tells where their logs agree
(`find_consistent_point`); the slave cuts its log there before it copies anything.

Decisions, KEEP or FIX against RocketMQ:

1. FIX (#9689). An epoch that wrote nothing (the next epoch starts at the same offset) is replaced
   by the next one instead of refusing it: RocketMQ refuses `start <= last start` only for a
   greater start, and keeps two entries with one start that confuse the consistent point.
2. FIX. After a truncation the last entry is open again (RocketMQ resets the end on a copy, so the
   stored entry keeps its old end).
3. KEEP. Entries starting at or past a truncation offset are dropped, except an epoch that starts
   exactly at the new end and wrote nothing yet (`reconcile`): it is the current master's own.
"""

import zlib
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class EpochEntry:
    epoch: int
    start_offset: int
    end_offset: int | None = None  # None: the last entry, still open


class EpochCache:
    def __init__(self, entries: list[tuple[int, int]] | None = None) -> None:
        self._entries: list[tuple[int, int]] = []  # (epoch, start), both strictly increasing... see append
        for epoch, start in entries or ():
            if not self.append(epoch, start):
                raise ValueError(f"epoch {epoch} at {start} does not follow {self._entries[-1]}")

    @property
    def entries(self) -> list[EpochEntry]:
        ends = [start for _, start in self._entries[1:]] + [None]
        return [EpochEntry(epoch, start, end) for (epoch, start), end in zip(self._entries, ends)]

    @property
    def last_epoch(self) -> int:
        return self._entries[-1][0] if self._entries else 0

    @property
    def last_start(self) -> int:
        return self._entries[-1][1] if self._entries else 0

    def pairs(self) -> list[tuple[int, int]]:
        return list(self._entries)

    def append(self, epoch: int, start_offset: int) -> bool:
        """Record that `epoch` writes from `start_offset`; False unless the epoch is newer and
        the start not earlier than the last entry's (decision 1: an equal start replaces it)."""
        if epoch < 1 or start_offset < 0:
            return False
        if self._entries:
            last_epoch, last_start = self._entries[-1]
            if epoch <= last_epoch or start_offset < last_start:
                return False
            if start_offset == last_start:
                self._entries.pop()
        self._entries.append((epoch, start_offset))
        return True

    def entry_for_offset(self, offset: int) -> EpochEntry | None:
        """The entry whose range holds `offset` (the last one holds everything from its start)."""
        for entry in reversed(self.entries):
            if entry.start_offset <= offset:
                return entry
        return None

    def end_of(self, epoch: int) -> int | None:
        """Where `epoch` ends (None: it is the last, or unknown)."""
        for entry in self.entries:
            if entry.epoch == epoch:
                return entry.end_offset
        return None

    def truncate_suffix_by_offset(self, offset: int) -> None:
        """Drop entries that start at or past `offset` (the log was cut there; decision 2)."""
        self._entries = [(epoch, start) for epoch, start in self._entries if start < offset]

    def truncate_suffix_by_epoch(self, epoch: int) -> None:
        """Drop entries of `epoch` and newer."""
        self._entries = [(e, start) for e, start in self._entries if e < epoch]

    def truncate_prefix_by_offset(self, offset: int) -> None:
        """Drop entries that end at or before `offset` (old segments were deleted)."""
        entries = self.entries
        self._entries = [(e.epoch, e.start_offset) for e in entries if e.end_offset is None or e.end_offset > offset]

    def reconcile(self, max_offset: int) -> None:
        """Drop epochs the log does not reach, keeping one that starts at its end (decision 3):
        after a crash between cutting the log and saving the epochs, the log is the truth."""
        self._entries = [(epoch, start) for epoch, start in self._entries if start <= max_offset]

    # The file's text: a count line, a crc32 line, then one `epoch-start` line per entry.

    def encode(self) -> bytes:
        body = "".join(f"{epoch}-{start}\n" for epoch, start in self._entries)
        return f"{len(self._entries)}\n{zlib.crc32(body.encode())}\n{body}".encode()

    @classmethod
    def decode(cls, data: bytes) -> "EpochCache":
        try:
            count_line, crc_line, body = data.decode().split("\n", 2)
            lines = [line for line in body.split("\n") if line]
            if int(count_line) != len(lines) or int(crc_line) != zlib.crc32(body.encode()):
                raise ValueError("count or crc does not match")
            pairs = [line.split("-") for line in lines]
            if any(len(pair) != 2 for pair in pairs):
                raise ValueError("an entry is not epoch-start")
            return cls([(int(epoch), int(start)) for epoch, start in pairs])
        except (UnicodeDecodeError, ValueError) as exc:
            raise ValueError(f"not an epoch file: {exc}") from None


def find_consistent_point(local: EpochCache, local_max: int, master: EpochCache, master_max: int) -> int:
    """Where the two logs agree: walking the local epochs from the newest, the first one the
    master has with the same start gives the smaller of the two ends (each log's last epoch ends at
    its max offset); -1 when they share none. An empty log agrees with any at 0: its epochs, if
    it has any (a master that died before its first message), name no bytes."""
    if local_max == 0:
        return 0
    master_entries = {entry.epoch: entry for entry in master.entries}
    for entry in reversed(local.entries):
        theirs = master_entries.get(entry.epoch)
        if theirs is None or theirs.start_offset != entry.start_offset:
            continue
        local_end = local_max if entry.end_offset is None else entry.end_offset
        master_end = master_max if theirs.end_offset is None else theirs.end_offset
        return min(local_end, master_end)
    return -1
