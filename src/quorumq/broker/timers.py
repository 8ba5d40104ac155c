"""A master's delay messages (core/timers.py): its index of pending timers, the loop that copies each
to its topic when it is due, and recalls.

The timer topic is the state, the index is derived from it. A master builds the index when it takes
the role (at start, or elected): it reads every record the topic holds, marks the timers the done
records name (core/timers.DoneSet) and files every other timer under the span it is due in, one file
of (delivery ms, offset) pairs per TIMER_INDEX_FILE_MS, so that memory does not grow with the
pending timers. A slave keeps no index: its log holds the records, and it builds one when elected.

The loop takes a span's file into memory when the span begins and copies each timer to its topic
at or after its delivery time, TIMER_DELIVER_BATCH at a time, each batch with a done record naming
its timers, in one write admitted and waited for as a send (SendPath.put_records); they are marked
done in the step that appends them. Only a failover that leaves a new master holding a batch's
copies without its done record delivers timers twice.
"""

import asyncio
import heapq
import logging
import shutil
import struct
from contextlib import suppress
from pathlib import Path

from quorumq import limits
from quorumq.broker.consumers import read_one
from quorumq.broker.master_task import MasterTask
from quorumq.core import properties
from quorumq.core.put_status import PutStatus
from quorumq.core.timers import (
    DELIVERED,
    DONE,
    RECALLED,
    TIMER_TOPIC,
    DoneSet,
    decode_done,
    decode_recall_handle,
    deliver_ms_of,
    encode_done,
)
from quorumq.errors import Error, QuorumqError
from quorumq.store import AppendResult, MessageIn, StoredMessage, walk_queue

log = logging.getLogger("quorumq.broker")

INDEX_DIR = "timerIndex"
_ENTRY = struct.Struct("<qq")  # an index entry: (delivery ms, timer record offset)


class Timers:
    def __init__(self, broker) -> None:  # the Broker (broker/broker.py) this is a part of
        self._broker = broker
        self._dir = Path(broker.config["storePathRootDir"]) / INDEX_DIR
        self._done = DoneSet()
        self._ready = False  # the index covers the whole topic: a master's, once built
        self._scanned = 0  # while the index is built: the topic's offsets below this are in it
        self._files: set[int] = set()  # the spans with entries not yet taken into memory
        self._unwritten: dict[int, bytearray] = {}  # their entries not yet written to their file
        self._span = -1  # the latest span taken into memory
        self._due: list[tuple[int, int]] = []  # the taken spans' entries, a heap
        self._wake = asyncio.Event()
        self._loop = MasterTask(self._run)
        self.figures = {"timersPending": 0, "timersDelivered": 0, "timersRecalled": 0, "timersDropped": 0}

    def start(self) -> None:
        """This broker is now the master: build the index, then deliver."""
        self._loop.start()

    async def stop(self) -> None:
        self._ready = False
        await self._loop.stop()

    def check_ready(self) -> None:
        self._broker.sends.check_role()
        if not self._ready:
            raise QuorumqError(Error.SERVICE_NOT_AVAILABLE, "the master is reading its timers; retry shortly")

    # The index.

    def added(self, message: MessageIn, offset: int) -> None:
        """The send path appended a timer record at `offset`."""
        if self._loop.running and (self._ready or offset < self._scanned):  # else the build reads it
            self._index(deliver_ms_of(message.properties), offset)

    def _index(self, deliver_ms: int, offset: int) -> None:
        self.figures["timersPending"] += 1
        span = deliver_ms // limits.TIMER_INDEX_FILE_MS
        if span <= self._span:
            heapq.heappush(self._due, (deliver_ms, offset))
            if self._due[0] == (deliver_ms, offset):
                self._wake.set()
        else:
            self._unwritten.setdefault(span, bytearray()).extend(_ENTRY.pack(deliver_ms, offset))
            self._files.add(span)

    def _mark_done(self, offsets: list[int]) -> None:
        for offset in offsets:
            if self._done.mark(offset):
                self.figures["timersPending"] -= 1

    async def _build(self) -> None:
        """The index from the whole timer topic, read a batch at a time between other requests."""
        store = self._broker.store
        shutil.rmtree(self._dir, ignore_errors=True)
        self._dir.mkdir(parents=True)
        self._files, self._unwritten, self._due, self._span = set(), {}, [], -1
        self._scanned = store.queue_min_offset(TIMER_TOPIC, 0)
        self._done = DoneSet(self._scanned)
        self.figures["timersPending"] = 0
        started = self._broker.clock.monotonic()
        for result in walk_queue(store, TIMER_TOPIC, 0, self._scanned):
            for message in result.messages:
                self._read_record(message)
            self._scanned = result.next_offset
            self._write_files()
            await asyncio.sleep(0)
        self._ready = True
        log.info("timer index built from offset %d to %d in %.3f s: %d timers pending", self._done.base,
                 self._scanned, self._broker.clock.monotonic() - started, self.figures["timersPending"])

    def _read_record(self, message: StoredMessage) -> None:
        try:
            if DONE in message.properties:
                self._done.mark(message.queue_offset)
                self._mark_done(decode_done(message.body))
            else:
                self._index(deliver_ms_of(message.properties), message.queue_offset)
        except (ValueError, KeyError) as exc:
            log.error("timer record at %d skipped: %s", message.queue_offset, exc)
            self._done.mark(message.queue_offset)

    def _write_files(self) -> None:
        """Append the entries of later spans to their files (kept in memory to try again on a failure)."""
        for span in list(self._unwritten):
            try:
                with open(self._dir / str(span), "ab") as file:
                    file.write(self._unwritten[span])
            except OSError as exc:
                log.error("timer index file %d not written; tried again: %s", span, exc)
                return
            del self._unwritten[span]

    def _take(self, span: int) -> None:
        """A span begins: its entries into memory, its file gone."""
        path = self._dir / str(span)
        try:
            data = path.read_bytes() + self._unwritten.pop(span, b"")
            path.unlink(missing_ok=True)
        except FileNotFoundError:
            data = self._unwritten.pop(span, bytearray())
        for entry in _ENTRY.iter_unpack(data):
            heapq.heappush(self._due, entry)
        self._files.discard(span)

    # The loop.

    async def _run(self) -> None:
        while True:
            try:
                if not self._ready:
                    await self._build()
                await self._step()
                continue
            except QuorumqError as error:  # refused before anything was stored (not the master, disk full)
                log.warning("timers not delivered now, tried again: %s", error)
            except Exception:  # a defect: said loudly, and the timers are tried again
                log.exception("the timer loop failed; it goes on")
            await asyncio.sleep(self._broker.config["timerPrecisionMs"] / 1000)

    async def _step(self) -> None:
        now = self._broker.clock.now_ms()
        span = now // limits.TIMER_INDEX_FILE_MS
        if span > self._span:
            for taken in sorted(file for file in self._files if file <= span):
                self._take(taken)
            self._span = span  # from now on, entries due by the span's end go to memory at once
        self._write_files()
        batch: list[tuple[int, int]] = []
        while self._due and self._due[0][0] <= now and len(batch) < limits.TIMER_DELIVER_BATCH:
            entry = heapq.heappop(self._due)
            if entry[1] not in self._done:
                batch.append(entry)
        if batch:
            try:
                await self._deliver(batch)
            except QuorumqError:
                for entry in batch:
                    heapq.heappush(self._due, entry)
                raise
            return
        next_at = min(self._due[0][0] if self._due else now + limits.TIMER_INDEX_FILE_MS,
                      (span + 1) * limits.TIMER_INDEX_FILE_MS)
        self._wake.clear()
        sleep_ms = min(next_at - now, self._broker.config["timerPrecisionMs"])
        with suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._wake.wait(), sleep_ms / 1000)

    async def _deliver(self, batch: list[tuple[int, int]]) -> None:
        """Copy due timers to their topics, with their done record, in one write."""
        copies, offsets = [], []
        for deliver_ms, offset in batch:
            stored = read_one(self._broker.store, TIMER_TOPIC, 0, offset)
            if stored is None or DONE in stored.properties or deliver_ms_of(stored.properties) != deliver_ms:
                # Retention took it, or a cut of the log put another record there (indexed on its own).
                log.error("timer record at %d is no longer the one indexed: not delivered", offset)
                self._mark_done([offset])
                continue
            try:
                copies.append(self._broker.sends.unpark(stored))
            except QuorumqError as error:
                self.figures["timersDropped"] += 1
                log.error("timer %s to topic %s dropped: %s", stored.properties.get(properties.MESSAGE_ID),
                          stored.properties.get(properties.REAL_TOPIC), error)
            offsets.append(offset)
        if offsets:
            status = await self._record_done(offsets, DELIVERED, copies)
            self.figures["timersDelivered"] += len(copies)
            if status is not PutStatus.PUT_OK:
                log.warning("%d timers delivered but not held as a send needs: %s", len(copies), status.value)

    async def _record_done(self, offsets: list[int], why: str, copies: list[MessageIn],
                           answer_by: float | None = None) -> PutStatus:
        broker = self._broker
        done = MessageIn(topic=TIMER_TOPIC, queue_id=0, body=encode_done(offsets), properties={DONE: why},
                         born_timestamp_ms=broker.clock.now_ms(), born_host=broker.address)

        def noted(appended: AppendResult) -> None:
            self._done.mark(appended.offsets[-1][1])
            self._mark_done(offsets)

        return await broker.sends.put_records(copies + [done], noted, answer_by)


    # Recall.

    async def recall(self, topic: str, handle: str, answer_by: float | None) -> str:
        """Cancel the pending timer `handle` names (RecallMessage): its message id."""
        named_topic, broker_name, offset, message_id = decode_recall_handle(handle)
        if named_topic != topic:
            raise QuorumqError(Error.INVALID_RECALL_HANDLE, f"the recall handle names topic {named_topic}, not {topic}")
        if broker_name != self._broker.config["brokerName"]:
            raise QuorumqError(Error.INVALID_RECALL_HANDLE, f"the recall handle names broker {broker_name}, not "
                                                            f"{self._broker.config['brokerName']}")
        self.check_ready()
        stored = read_one(self._broker.store, TIMER_TOPIC, 0, offset)
        if stored is None or DONE in stored.properties or stored.properties.get(properties.MESSAGE_ID) != message_id:
            raise QuorumqError(Error.INVALID_RECALL_HANDLE, f"no delay message {message_id} is stored where the "
                                                            "recall handle says")
        if offset in self._done:
            raise QuorumqError(Error.TIMER_NOT_PENDING, f"delay message {message_id} was already delivered or "
                                                        "recalled")
        status = await self._record_done([offset], RECALLED, [], answer_by)
        if status is not PutStatus.PUT_OK:
            raise QuorumqError(Error.SLAVE_PERSISTENCE_TIMEOUT, f"delay message {message_id} recalled here, but the "
                                                                f"recall is not held as a send needs: {status.value}")
        self.figures["timersRecalled"] += 1
        return message_id
