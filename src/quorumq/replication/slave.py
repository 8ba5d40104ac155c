"""The slave side of the replication stream: an asyncio adapter around the frame codec
(core/replication_frames.py). It only moves bytes and timers.

The slave connects to its master's haListenPort and sends a HANDSHAKE with the end of its own
commit log; the master streams DATA from there. Each DATA is appended with `store.append_raw` at
exactly the offset the log ends at (the codec already refuses a gap or an overlap; append_raw
checks the offset and every record again, as client input: a topic name, queue id or queue offset
that no client could send is refused before any file is touched). A protocol error, a refused
append, silence (no whole frame, nor REPLICATION_READ_BYTES of one) for `housekeeping_interval_s`
or a closed connection ends the session; the slave connects again after a backoff (doubling from
HA_RECONNECT_BACKOFF_S_MIN to _MAX, reset by a session that received something and had nothing
refused) and resumes from its own max offset.

What an ACK means (the master counts the slave's acked offset toward the quorum):

* `acks_flushed=False` (the slave runs ASYNC_FLUSH): the slave acks what it has written, i.e.
  what is in its page cache. It survives the slave process dying, not the slave machine.
* `acks_flushed=True` (the slave runs SYNC_FLUSH): the slave acks what it has fsync'd. After
  appending, a flush task fdatasyncs in a worker thread (group commit: one sync covers every
  append before it) and then acks.

Every ACK carries both offsets; the handshake tells the master which one counts. The slave also
reports at least every `heartbeat_interval_s`, so an idle master does not close the connection.

In controller mode (`epochs` given) the broker has already cut its log to where it agrees with this
master (controller_link.py); the handshake names the epoch of the slave's last bytes, a DATA frame
of a newer epoch is recorded in the epoch file before its bytes are appended, and a HEARTBEAT from
a master whose current epoch is older than the one the controller announced (`known_epoch`) ends
the session: a deposed master gets no acks.

With `credentials` (authenticationEnabled: the cluster's inner credentials) the slave first reads
the master's CHALLENGE and sends its ANSWER before the HANDSHAKE (core/replication_auth.py).
"""

import asyncio
import functools
import logging
import ssl
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from quorumq import limits
from quorumq.clock import Clock
from quorumq.core.auth import Credentials
from quorumq.core.epochs import EpochCache
from quorumq.core.replication_auth import CHALLENGE_BYTES, decode_challenge, encode_answer
from quorumq.core.replication_frames import (
    NEED_DATA,
    Ack,
    ConnectionClosed,
    Data,
    Handshake,
    Heartbeat,
    RemoteProtocolError,
    ReplicationConnection,
    Role,
)
from quorumq.errors import QuorumqError
from quorumq.store.epoch_file import EpochFile
from quorumq.store.message_store import MessageStore

log = logging.getLogger(__name__)


class ReplicationSlave:
    def __init__(self, store: MessageStore, *, clock: Clock, master_host: str, master_port: int, broker_id: int,
                 cluster_name: str, broker_name: str, acks_flushed: bool = False, async_learner: bool = False,
                 sync_from_last_file: bool = False,
                 epochs: EpochCache | None = None, epoch_file: EpochFile | None = None, known_epoch: int = 0,
                 on_appended: Callable[[], None] | None = None,
                 heartbeat_interval_s: float = limits.HA_SEND_HEARTBEAT_INTERVAL_MS_DEFAULT / 1000,
                 housekeeping_interval_s: float = limits.HA_HOUSEKEEPING_INTERVAL_MS_DEFAULT / 1000,
                 backoff_min_s: float = limits.HA_RECONNECT_BACKOFF_S_MIN,
                 backoff_max_s: float = limits.HA_RECONNECT_BACKOFF_S_MAX,
                 tls: ssl.SSLContext | None = None, credentials: Credentials | None = None) -> None:
        if broker_id < 1:
            raise ValueError(f"a slave's brokerId must be at least 1, got {broker_id}")
        if not 0 < heartbeat_interval_s < housekeeping_interval_s:
            raise ValueError("the heartbeat interval must be positive and below the housekeeping interval")
        if not 0 < backoff_min_s <= backoff_max_s:
            raise ValueError("reconnect backoff must satisfy 0 < min <= max")
        self._store = store
        self._clock = clock
        self.master_address = (master_host, master_port)  # read at every connection attempt
        self.broker_id = broker_id
        self.cluster_name = cluster_name
        self.broker_name = broker_name
        self.acks_flushed = acks_flushed
        self.async_learner = async_learner
        self.sync_from_last_file = sync_from_last_file
        self._epochs = epochs
        self._epoch_file = epoch_file
        self.known_epoch = known_epoch  # the master epoch the controller announced (0 without one)
        self._on_appended = on_appended  # called soon after the records of each read are appended and acked
        self._heartbeat_s = heartbeat_interval_s
        self._housekeeping_s = housekeeping_interval_s
        self._backoff_min_s = backoff_min_s
        self._backoff_max_s = backoff_max_s
        self._tls = tls  # the master's certificate is checked against master_host
        self._credentials = credentials  # answer the master's challenge with these
        self._task: asyncio.Task | None = None
        self._received = False  # the current session has received a frame
        self._flush_thread: ThreadPoolExecutor | None = None
        # What the slave last heard from its master, for admin output and tests.
        self.connected = False
        self.sessions = 0  # handshakes sent
        self.failures = 0  # sessions ended by an error
        self.master_max_offset: int | None = None
        self.master_confirm_offset: int | None = None

    # Life cycle.

    def start(self) -> None:
        assert self._task is None, "slave already started"
        if self.acks_flushed:
            self._flush_thread = ThreadPoolExecutor(1, thread_name_prefix="quorumq-slave-flush")
        self._task = asyncio.create_task(self._run(), name=f"quorumq-slave-{self.broker_id}")

    async def stop(self) -> None:
        """Close the connection and stop reconnecting."""
        outcome = None
        if self._task is not None:
            self._task.cancel()
            [outcome] = await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        if self._flush_thread is not None:
            self._flush_thread.shutdown()
            self._flush_thread = None
        self.connected = False
        if isinstance(outcome, Exception):
            raise outcome  # a bug stopped replication earlier; it was logged then

    async def _run(self) -> None:
        backoff = self._backoff_min_s
        while True:
            self._received = refused = False
            try:
                await self._session()
                log.info("slave %d: the master closed the connection", self.broker_id)
            except QuorumqError as exc:
                # The store refused the master's records (one naming no valid topic, say) or cannot
                # write: nothing of them is stored, and the master would send them again at once.
                self.failures += 1
                refused = True
                log.error("slave %d: records from the master at %s:%d refused, none stored; replication "
                          "stops until it sends valid ones (tried again every %.0f s): %s", self.broker_id,
                          *self.master_address, self._backoff_max_s, exc)
            except (RemoteProtocolError, OSError, TimeoutError) as exc:
                self.failures += 1
                log.warning("slave %d: replication from %s:%d failed: %s: %s", self.broker_id,
                            *self.master_address, type(exc).__name__, exc)
            except Exception:
                log.exception("slave %d: replication stopped by a bug", self.broker_id)
                raise
            finally:
                self.connected = False
            # A session that received anything resets the backoff; failing or refused ones double it.
            backoff = self._backoff_min_s if self._received and not refused else min(2 * backoff, self._backoff_max_s)
            await asyncio.sleep(backoff)

    # One session.

    async def _session(self) -> None:
        """Connect, handshake and replicate until the connection ends."""
        host, port = self.master_address
        async with asyncio.timeout(self._housekeeping_s):
            reader, writer = await asyncio.open_connection(host, port, ssl=self._tls)
        codec = ReplicationConnection(Role.SLAVE)
        self.master_max_offset = self.master_confirm_offset = None
        flush_wanted = asyncio.Event()
        tasks: list[asyncio.Task] = []
        try:
            log_epoch = self._epochs.last_epoch if self._epochs is not None else 0
            handshake = Handshake(self.broker_id, self.cluster_name, self.broker_name, self._store.max_offset,
                                  log_epoch, self.acks_flushed, self.async_learner, self.sync_from_last_file)
            if self._credentials is not None:
                writer.write(encode_answer(self._credentials, await self._read_challenge(reader), handshake))
            writer.write(codec.encode(handshake))
            self.sessions += 1
            self._send_ack(writer, codec)
            self.connected = True
            tasks.append(asyncio.create_task(self._report_loop(writer, codec)))
            if self.acks_flushed:
                tasks.append(asyncio.create_task(self._flush_loop(writer, codec, flush_wanted)))
            for task in tasks:  # a helper that fails closes the socket, which ends the read below
                task.add_done_callback(functools.partial(_close_on_failure, writer))
            heard_by = self._clock.monotonic() + self._housekeeping_s
            unheard = 0  # bytes received since heard_by was last set
            while True:
                # Silence is neither a whole frame nor REPLICATION_READ_BYTES of one: a DATA length
                # damaged on the way (within the frame limit) would otherwise keep the session
                # waiting, for good, for megabytes that the master's heartbeats deliver a few bytes
                # at a time; a large record on a slow link still makes progress.
                async with asyncio.timeout(heard_by - self._clock.monotonic()):
                    data = await reader.read(limits.REPLICATION_READ_BYTES)
                codec.feed(data)
                appended, heard, closed = self._take_events(codec)
                unheard += len(data)
                if heard or unheard >= limits.REPLICATION_READ_BYTES:
                    heard_by, unheard = self._clock.monotonic() + self._housekeeping_s, 0
                for task in tasks:
                    if task.done():
                        task.result()  # raises what ended a helper loop
                if appended:
                    if self.acks_flushed:
                        flush_wanted.set()
                    else:
                        self._send_ack(writer, codec)
                    if self._on_appended is not None:
                        # Once the ack (or the flush before it) is under way: a send waiting for
                        # this copy does not wait for what the broker does with it.
                        asyncio.get_running_loop().call_soon(self._on_appended)
                if closed:
                    return
                await asyncio.sleep(0)  # read() does not yield while data is buffered
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            writer.close()

    async def _read_challenge(self, reader: asyncio.StreamReader) -> bytes:
        """The master's nonce; it sends nothing else before the handshake."""
        buffer = b""
        async with asyncio.timeout(self._housekeeping_s):
            while (nonce := decode_challenge(buffer)) is None:
                if not (data := await reader.read(CHALLENGE_BYTES - len(buffer))):
                    raise RemoteProtocolError("the master closed the connection before its challenge")
                buffer += data
        return nonce

    def _take_events(self, codec: ReplicationConnection) -> tuple[bool, bool, bool]:
        """Apply every complete frame; returns (appended anything, any frame, the master closed).

        Consecutive DATA frames of one epoch go to the store as one append: a master sends a large
        append in haTransferBatchSize pieces, and every append costs the store its writes."""
        appended = heard = False
        run: list[Data] = []  # DATA frames not yet appended; the codec has checked they are contiguous
        while True:
            event = codec.next_event()
            if run and not (isinstance(event, Data) and (event.epoch, event.epoch_start_offset)
                            == (run[0].epoch, run[0].epoch_start_offset)):
                self._append(run)
                appended, run = True, []
            if event is NEED_DATA:
                return appended, heard, False
            if isinstance(event, ConnectionClosed):
                return appended, heard, True
            heard = True
            assert isinstance(event, (Data, Heartbeat)), event  # the transition table admits nothing else
            self._received = True
            if isinstance(event, Data):
                run.append(event)
            elif event.epoch < self.known_epoch:
                raise RemoteProtocolError(f"the master is at epoch {event.epoch}, the controller elected one "
                                          f"at epoch {self.known_epoch}: it is deposed")
            if isinstance(event, Heartbeat):
                self.master_max_offset = event.offset
            else:
                self.master_max_offset = max(self.master_max_offset or 0, event.end_offset)
            self.master_confirm_offset = event.confirm_offset

    def _append(self, run: list[Data]) -> None:
        first, last = run[0], run[-1]
        self._note_epoch(first.epoch, first.epoch_start_offset)
        data = first.data if len(run) == 1 else b"".join([frame.data for frame in run])
        end = self._store.append_raw(first.offset, data)
        assert end == last.end_offset, (end, last.end_offset)

    def _note_epoch(self, epoch: int, start_offset: int) -> None:
        """Record a newer epoch in the epoch file before any of its bytes are appended."""
        if self._epochs is None or epoch <= self._epochs.last_epoch:
            return
        if not self._epochs.append(epoch, start_offset):
            raise RemoteProtocolError(f"epoch {epoch} from {start_offset} does not follow {self._epochs.entries[-1]}")
        self._epoch_file.save(self._epochs)

    def _send_ack(self, writer: asyncio.StreamWriter, codec: ReplicationConnection) -> None:
        flushed = self._store.flushed_offset  # read first: it never passes the written offset
        written = self._store.max_offset
        writer.write(codec.encode(Ack(written, min(flushed, written))))

    async def _report_loop(self, writer: asyncio.StreamWriter, codec: ReplicationConnection) -> None:
        while True:
            await asyncio.sleep(self._heartbeat_s)
            self._send_ack(writer, codec)

    async def _flush_loop(self, writer: asyncio.StreamWriter, codec: ReplicationConnection,
                          flush_wanted: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await flush_wanted.wait()
            flush_wanted.clear()
            await loop.run_in_executor(self._flush_thread, self._store.flush)
            self._send_ack(writer, codec)


def _close_on_failure(writer: asyncio.StreamWriter, task: asyncio.Task) -> None:
    if not task.cancelled() and task.exception() is not None:
        writer.close()
