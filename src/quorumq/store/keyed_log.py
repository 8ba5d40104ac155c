"""A durable map of keys to JSON values kept as an append-only log, so that one change costs one
append and one fsync, whatever the number of entries (topic configs, consumer groups).

Each line of the file is a record: the CRC-32 of its JSON text in 8 hex digits, a space, the JSON
text, a newline. The text holds the changes of one call, `{"put": {key: value, ...}, "delete":
[key, ...]}`, so a call's changes are kept whole or not at all. Loading replays the records in
order. A crash can leave the last record torn (cut short, or with a bad CRC): it is dropped, as its
call was never answered, and the next change rewrites the file without it; a bad record before the
last one is STORE_CORRUPTED. Once the log holds more than KEYED_LOG_RECORDS_PER_ENTRY changes per
live entry (plus KEYED_LOG_SLACK_RECORDS), the next change rewrites it atomically with one
record per live entry: writes per change stay O(1) amortised.

A change is on disk before its call returns; when the write fails, nothing changes in memory and
the caller gets the catalogue's write error (DISK_FULL on a full disk).
"""

import json
import logging
import os
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, Generic, NoReturn, TypeVar

from quorumq import limits
from quorumq.errors import Error, QuorumqError, write_error
from quorumq.store.atomic_file import write_atomically
from quorumq.store.commit_log import fsync_directory

log = logging.getLogger(__name__)

V = TypeVar("V")
_ABSENT = object()


def _same(value: V) -> Any:
    return value


def encode_record(puts: Mapping[str, Any], deletes: Iterable[str] = ()) -> bytes:
    body: dict[str, Any] = {"put": dict(puts)} if puts else {}
    deletes = list(deletes)
    if deletes:
        body["delete"] = deletes
    text = json.dumps(body, separators=(",", ":")).encode()  # ASCII: no newline inside
    return b"%08x %s\n" % (zlib.crc32(text), text)


def _decode_record(line: bytes) -> dict[str, Any] | None:
    """The changes of a whole line, or None when it fails its CRC or does not parse."""
    crc, _, text = line.partition(b" ")
    try:
        if len(crc) != 8 or int(crc, 16) != zlib.crc32(text):
            return None
        body = json.loads(text)
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


class KeyedLog(Generic[V]):
    """`encode` turns a value into JSON data, `decode` back (raising on data that is not a value).
    `legacy` names the whole-file JSON object ({key: value}) an older version kept: when there is
    no log yet, loading takes its entries into a new log and removes it."""

    def __init__(self, path: Path, what: str, encode: Callable[[V], Any] = _same,
                 decode: Callable[[Any], V] = _same, legacy: Path | None = None, mode: int = 0o644) -> None:
        self.path = Path(path)
        self._mode = mode  # the file's permissions: 0o600 for secrets
        self.what = what  # how errors name the content, "topic configs"
        self._encode = encode
        self._decode = decode
        self._legacy = legacy
        self._entries: dict[str, V] = {}
        self._records = 0  # changes the file holds, live or overwritten since
        self._size = 0  # bytes of whole records in the file
        self._rewrite = True  # the next change rewrites the file: none yet, or a torn tail after `_size`

    def load(self) -> None:
        if self._legacy is not None and self._legacy.exists():
            if not self.path.exists():
                self._migrate(self._legacy)
            self._legacy.unlink()
            fsync_directory(self._legacy.parent)
        self._entries, self._records, self._size = {}, 0, 0
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            self._rewrite = True
            return
        lines = data.split(b"\n")
        for number, line in enumerate(lines[:-1], 1):  # the last item follows the last newline
            body = _decode_record(line)
            if body is None:
                if number == len(lines) - 1 and not lines[-1]:
                    break  # the last record, torn
                self._corrupted(f"record {number} fails its checksum, and records follow")
            self._replay(body, number)
            self._size += len(line) + 1
        self._rewrite = self._size < len(data)
        if self._rewrite:
            log.warning("%s: dropped a torn last record (%d bytes)", self.path, len(data) - self._size)

    def _migrate(self, legacy: Path) -> None:
        try:
            data = json.loads(legacy.read_bytes())
            entries = {str(key): self._decode(value) for key, value in data.items()}
        except (ValueError, TypeError, AttributeError, KeyError, QuorumqError) as exc:
            raise QuorumqError(Error.STORE_CORRUPTED, f"unreadable {self.what} {legacy}: {exc}") from None
        self._write_whole(entries.items())
        log.info("%s: %d entries taken from %s", self.path, len(entries), legacy)

    def _replay(self, body: dict[str, Any], number: int) -> None:
        try:
            for key, value in body.get("put", {}).items():
                self._entries[key] = self._decode(value)
            for key in body.get("delete", []):
                self._entries.pop(key, None)
            self._records += len(body.get("put", {})) + len(body.get("delete", []))
        except (ValueError, TypeError, AttributeError, KeyError, QuorumqError) as exc:
            self._corrupted(f"record {number} holds no {self.what}: {exc}")

    def _corrupted(self, detail: str) -> NoReturn:
        raise QuorumqError(Error.STORE_CORRUPTED, f"unreadable {self.what} {self.path}: {detail}")

    # Reading.

    def get(self, key: str) -> V | None:
        return self._entries.get(key)

    def __contains__(self, key: str) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def entries(self) -> dict[str, V]:
        """Every entry. Do not mutate."""
        return self._entries

    # Changing.

    def put(self, key: str, value: V) -> bool:
        return self.update({key: value})

    def delete(self, key: str) -> bool:
        return self.update({}, [key])

    def update(self, puts: Mapping[str, V], deletes: Iterable[str] = ()) -> bool:
        """Set `puts` and remove `deletes` in one write; whether anything changed."""
        puts = {key: value for key, value in puts.items() if self._entries.get(key, _ABSENT) != value}
        removed = [key for key in dict.fromkeys(deletes) if key in self._entries and key not in puts]
        if not puts and not removed:
            return False
        changes = len(puts) + len(removed)
        live = len(self._entries) + sum(key not in self._entries for key in puts) - len(removed)
        bound = limits.KEYED_LOG_RECORDS_PER_ENTRY * live + limits.KEYED_LOG_SLACK_RECORDS
        compact = self._records + changes > bound
        try:
            if self._rewrite or compact:
                self._write_whole(self._after(puts, removed))
            else:
                self._append(encode_record({key: self._encode(value) for key, value in puts.items()}, removed))
                self._records += changes
        except OSError as exc:
            raise write_error(exc, f"{self.what} not written") from exc
        self._entries.update(puts)
        for key in removed:
            del self._entries[key]
        return True

    def _after(self, puts: dict[str, V], removed: list[str]) -> Iterator[tuple[str, V]]:
        """The entries as they are once `puts` and `removed` are applied."""
        gone = set(removed)
        for key, value in self._entries.items():
            if key not in gone and key not in puts:
                yield key, value
        yield from puts.items()

    def _write_whole(self, entries: Iterable[tuple[str, V]]) -> None:
        """Rewrite the file with one record per entry, atomically. Until that succeeds the next
        change rewrites it again: a failure may leave either content."""
        self._rewrite = True
        records = [encode_record({key: self._encode(value)}) for key, value in entries]
        data = b"".join(records)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(self.path, data, self._mode)
        self._records, self._size, self._rewrite = len(records), len(data), False

    def _append(self, record: bytes) -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        try:
            try:
                view = memoryview(record)
                while view:
                    view = view[os.write(fd, view):]
                os.fsync(fd)
            except OSError:
                self._cut_back(fd)
                raise
            self._size += len(record)
        finally:
            os.close(fd)

    def _cut_back(self, fd: int) -> None:
        """Take a failed append's bytes off the file, so that later records follow whole ones;
        when that fails too, the next change rewrites the file."""
        try:
            os.ftruncate(fd, self._size)
            os.fsync(fd)
        except OSError:
            self._rewrite = True
