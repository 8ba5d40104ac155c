"""The history of a chaos run: every operation as JSON lines, its invocation first, then its
completion: ok, fail (it certainly did not happen) or info (unknown: it may have happened).

A record: {"time": monotonic s, "process", "type": invoke|ok|fail|info, "f", "op", "value", ...};
a completion repeats its invocation's process, f and value. Kinds the checkers read:
  send: value "p3-17" (producer p3, sequence 17); ok adds queue "broker-a:2", offset, epoch, broker.
  position: value {"group", "queue"}: a consumer read the committed offset; ok adds offset (None: none).
  commit: value {"group", "queue", "offset"}: a consumer committed the offset after what it read.
  translated: value a group: its committed offsets on the replicator's standby; ok adds offsets
    {"<broker>:<queue id>": offset}.
  W6 (FIFO): fifo-send (value "g3-17": message group g3, sequence 17; ok adds id, offset, wall_ms);
    fifo-receive and dlq-receive (value {"group"}; the invocation has invisible_s, ok adds messages
    [{"value", "id", "queue", "offset", "attempt"}]); fifo-ack and fifo-fail (value the message's,
    with its id; a failure's invocation says how, "nack" or "expire", and whether it was poison);
    fifo-crash (value the consumer dropped, with the values it held); fifo-drain.
  W7 (timers and transactions): timer-send (value "d1-17"; the invocation has deliver_ms, the
    delivery time in wall ms; ok adds id, offset and wall_ms, the client's wall time of the ack);
    tx-send (value "x0-5-<fate>", the transaction's fate; ok as a timer-send's); tx-end (the
    producer's decision: resolution "commit" or "rollback") and tx-check (a checker's answer to
    the broker's check: resolution "commit", "rollback" or "unknown"; completed by its
    EndTransaction's outcome); timer-receive and tx-receive (value {"group"}; ok adds wall_ms,
    the client's wall time when it returned, and messages [{"value", "id", "queue", "offset",
    "attempt", "deliver_ms"}]); tx-restart (a transactional producer replaced by a new one; value
    its generation); timer-drain.
Others (the nemesis's "fault" and "heal") are kept for the reader and the availability figures."""

from __future__ import annotations

import itertools
import json
import threading
import time
from pathlib import Path
from typing import Any


class History:
    """Appends records to a file, from any thread; each line is written whole and flushed."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._out = open(path, "a", buffering=1)
        self._lock = threading.Lock()
        self._ops = itertools.count()
        self._invoked: dict[int, dict[str, Any]] = {}

    def invoke(self, process: str, f: str, value: Any, **extra: Any) -> int:
        with self._lock:
            op = next(self._ops)
            record = {"process": process, "f": f, "value": value}
            self._invoked[op] = record
            self._write({"type": "invoke", "op": op, **record, **extra})
            return op

    def ok(self, op: int, **extra: Any) -> None:
        self._complete("ok", op, extra)

    def fail(self, op: int, error: str, **extra: Any) -> None:
        self._complete("fail", op, {"error": error, **extra})

    def info(self, op: int, error: str, **extra: Any) -> None:
        self._complete("info", op, {"error": error, **extra})

    def close(self) -> None:
        self._out.close()

    def _complete(self, kind: str, op: int, extra: dict[str, Any]) -> None:
        with self._lock:
            self._write({"type": kind, "op": op, **self._invoked.pop(op), **extra})

    def _write(self, record: dict[str, Any]) -> None:
        self._out.write(json.dumps({"time": time.monotonic(), **record}) + "\n")


def read_history(path: Path) -> list[dict[str, Any]]:
    """The records in order; a torn last line (the writer died mid-line) is left out."""
    records = []
    with open(path) as lines:
        for line in lines:
            if line.endswith("\n"):
                records.append(json.loads(line))
    return records
