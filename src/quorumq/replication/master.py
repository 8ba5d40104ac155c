"""The master side of the replication stream: an asyncio adapter around the frame codec and the
ack tracker (core/replication_frames.py, core/quorum.py). It only moves bytes and timers.

Per slave connection: read the HANDSHAKE (within haHousekeepingInterval), check it, attach the
slave to the tracker, then run two loops until either ends. The sender reads whole records with
`store.read_raw` from the slave's offset on, at most `transfer_batch_bytes` per DATA frame (one
record alone may be larger), waits for `notify_appended` when it has caught up, and sends a
HEARTBEAT after `heartbeat_interval_s` of idleness. The receiver feeds ACKs to the tracker and
completes the puts they release. Silence for `housekeeping_interval_s`, a protocol error, an ack
the tracker rejects, or a store error ends the connection; the slave reconnects.

A second connection from a slave id already connected replaces the first, which is closed.

With `authenticate` (authenticationEnabled) the master first sends a CHALLENGE and reads the
slave's ANSWER before its HANDSHAKE (core/replication_auth.py); a slave that does not prove it
holds `inner` (innerClientAuthenticationCredentials) is refused, logged, and sent nothing more.

In controller mode (`epochs` given) every frame carries the master epoch that wrote its bytes, read
from the epoch cache for each frame, and a DATA frame never spans two epochs; a HEARTBEAT carries
the current epoch. Without a controller the epoch is 0.
"""

import asyncio
import logging
import secrets
import ssl
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

from quorumq import limits
from quorumq.clock import Clock
from quorumq.core.auth import User
from quorumq.core.epochs import EpochCache
from quorumq.core.put_status import PutStatus
from quorumq.core.quorum import AckRejected, AckTracker
from quorumq.core.replication_auth import NONCE_BYTES, decode_answer, encode_challenge, refusal
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
from quorumq.errors import Error, QuorumqError
from quorumq.store.message_store import MessageStore

log = logging.getLogger(__name__)

_WRITE_BUFFER_HIGH_BYTES = 1 * limits.MiB  # transport bytes queued before the sender pauses


class HandshakeRefused(Exception):
    """A slave's handshake does not fit this master: the connection is closed."""


@dataclass(eq=False)
class _SlaveConnection:
    handshake: Handshake
    session: int
    writer: asyncio.StreamWriter
    codec: ReplicationConnection
    start_offset: int  # where its stream starts (see ReplicationMaster._check_handshake)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    master_offset_at_send: int = 0  # the master's log end when it last sent DATA: "caught up" is an ack past it
    position: int = field(init=False)  # where the next DATA frame starts
    idle: bool = False  # the sender has sent everything and waits for notify_appended

    def __post_init__(self) -> None:
        self.position = self.start_offset


class ReplicationMaster:
    def __init__(self, store: MessageStore, *, clock: Clock, cluster_name: str, broker_name: str,
                 host: str = "127.0.0.1", port: int = 10912, tracker: AckTracker | None = None,
                 transfer_batch_bytes: int = limits.REPLICATION_TRANSFER_BATCH_BYTES_DEFAULT,
                 heartbeat_interval_s: float = limits.HA_SEND_HEARTBEAT_INTERVAL_MS_DEFAULT / 1000,
                 housekeeping_interval_s: float = limits.HA_HOUSEKEEPING_INTERVAL_MS_DEFAULT / 1000,
                 epochs: EpochCache | None = None,
                 on_slave_lost: Callable[[int], None] = lambda slave_id: None,
                 tls: ssl.SSLContext | None = None, authenticate: bool = False, inner: User | None = None) -> None:
        if not 0 < transfer_batch_bytes <= limits.REPLICATION_TRANSFER_BATCH_BYTES_MAX:
            raise ValueError(f"haTransferBatchSize must lie in 1..{limits.REPLICATION_TRANSFER_BATCH_BYTES_MAX}")
        if not 0 < heartbeat_interval_s < housekeeping_interval_s:
            raise ValueError("the heartbeat interval must be positive and below the housekeeping interval")
        self._store = store
        self._clock = clock
        self.cluster_name = cluster_name
        self.broker_name = broker_name
        self._host = host
        self._port = port
        self.tracker = tracker or AckTracker()
        self._batch_bytes = transfer_batch_bytes
        self._heartbeat_s = heartbeat_interval_s
        self._housekeeping_s = housekeeping_interval_s
        self._epochs = epochs
        self._on_slave_lost = on_slave_lost  # the put path may re-plan waiting puts (quorum decision 11)
        self._tls = tls  # a connection whose TLS handshake fails never reaches _serve
        self._authenticate = authenticate
        self._inner = inner  # the only identity a slave may prove (None: every slave is refused)
        self._server: asyncio.Server | None = None
        self._connections: dict[int, _SlaveConnection] = {}  # slave id -> its current connection
        self._handlers: dict[asyncio.Task, asyncio.StreamWriter] = {}  # connection handler -> its socket
        self._timer: asyncio.TimerHandle | None = None
        self._timer_deadline_s = 0.0  # when the armed timer fires, on the clock's monotonic time
        self._stopping = False

    # Life cycle.

    async def start(self) -> None:
        assert self._server is None, "master already started"
        try:
            self._server = await asyncio.start_server(self._serve, self._host, self._port,
                                                      limit=limits.REPLICATION_READ_BYTES, ssl=self._tls)
        except OSError as error:
            raise QuorumqError(Error.CONFIG_INVALID, f"cannot listen on {self._host}:{self._port} for "
                                                     f"replication: {error.strerror}") from None
        self._port = self._server.sockets[0].getsockname()[1]
        log.info("replication master %s/%s listening on %s:%d", self.cluster_name, self.broker_name,
                 self._host, self._port)

    @property
    def port(self) -> int:
        return self._port

    async def stop(self) -> None:
        """Close the listener and every slave connection; waiting puts get FLUSH_SLAVE_TIMEOUT."""
        self._stopping = True
        if self._server is not None:
            self._server.close()
        # Aborting the sockets ends every handler (its read sees the end of the stream); a handler
        # is not cancelled unless it lingers, as Python 3.11's streams log a cancelled handler.
        for writer in self._handlers.values():
            writer.transport.abort()
        if self._handlers:
            _, lingering = await asyncio.wait(list(self._handlers), timeout=self._housekeeping_s)
            for task in lingering:
                task.cancel()
            await asyncio.gather(*lingering, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.release(self.tracker.release_all())

    @property
    def epoch(self) -> int:
        """The current master epoch (0 without a controller)."""
        return self._epochs.last_epoch if self._epochs is not None else 0

    def _position_epoch(self, offset: int) -> tuple[int, int, int | None]:
        """(epoch, its start, its end or None) of the bytes at `offset`."""
        entry = self._epochs.entry_for_offset(offset) if self._epochs is not None else None
        if entry is None:  # no controller, or bytes from before the first epoch
            return 0, 0, None
        return entry.epoch, entry.start_offset, entry.end_offset

    # What the put path calls.

    def notify_appended(self) -> None:
        """The commit log grew. A sender that has caught up gets the new records from here, in the
        put's own step, so a send waiting for copies does not also wait for the sender's turn in
        the loop; any other sender is woken."""
        for connection in self._connections.values():
            if not (connection.idle and self._pushed(connection)):
                connection.wake.set()

    def _pushed(self, connection: _SlaveConnection) -> bool:
        """Send an idle connection's new records now, in one frame; whether that was all of them
        and its socket took them."""
        transport = connection.writer.transport
        if transport.get_write_buffer_size():
            return False
        try:
            self._send_data(connection)
        except Exception:  # noqa: BLE001 - the woken sender meets it again and ends the connection
            return False
        return connection.position == self._store.max_offset and not transport.get_write_buffer_size()

    def in_sync_replicas(self, gap: int, master_offset: int | None = None) -> int:
        """The master plus its slaves within `gap` bytes (haMaxGapNotInSync) of `master_offset`
        (default: the commit log's end now, i.e. the write position before the next append)."""
        offset = self._store.max_offset if master_offset is None else master_offset
        return self.tracker.in_sync_count(offset, gap)

    async def wait_acked(self, next_offset: int, need_ack: int, deadline_s: float) -> PutStatus:
        """PUT_OK once `need_ack` copies, this master's included, hold everything below
        `next_offset`; FLUSH_SLAVE_TIMEOUT at `deadline_s`, an absolute time on the clock's
        monotonic time."""
        if next_offset > self._store.max_offset:
            raise ValueError(f"offset {next_offset} lies past the end of the commit log {self._store.max_offset}")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[PutStatus] = loop.create_future()
        status = self.tracker.add_waiter(future, next_offset, need_ack, deadline_s)
        if status is not None:
            return status
        self._arm_timer()
        return await future

    def replan_waiting(self, need_ack: int | None) -> None:
        """A slave was lost: waiting puts need at most `need_ack` copies (None: as they did), and
        those needing more copies than the attached slaves can give end now (quorum decision 11)."""
        if need_ack is not None:
            self.release(self.tracker.lower_need(need_ack))
        self.release(self.tracker.fail_unreachable())

    @property
    def slaves(self) -> dict[int, Handshake]:
        """The handshake of every slave connected now, by slave id."""
        return {slave_id: connection.handshake for slave_id, connection in self._connections.items()}

    def caught_up_offsets(self) -> dict[int, int]:
        """Per connected slave, the offset an ack must reach for the slave to count as caught up
        (spec 2.8): the master's log end when it last sent it DATA, or its end now when the slave
        has been sent everything."""
        offsets = {}
        for slave_id, connection in self._connections.items():
            progress = self.tracker.slaves.get(slave_id)
            idle = progress is not None and progress.sent_offset >= self._store.max_offset
            offsets[slave_id] = self._store.max_offset if idle else connection.master_offset_at_send
        return offsets

    # Timers.

    def _arm_timer(self) -> None:
        deadline = self.tracker.next_deadline()
        if deadline is None:
            return
        if self._timer is not None:
            if self._timer_deadline_s <= deadline:
                return
            self._timer.cancel()
        self._timer = asyncio.get_running_loop().call_later(deadline - self._clock.monotonic(), self._on_timer)
        self._timer_deadline_s = deadline

    def _on_timer(self) -> None:
        self._timer = None
        self.release(self.tracker.expire(self._clock.monotonic()))
        self._arm_timer()

    @staticmethod
    def release(released: list[tuple[Hashable, PutStatus]]) -> None:
        """Complete the waiting puts the tracker released."""
        for future, status in released:
            if not future.done():  # its caller may have been cancelled
                future.set_result(status)

    # One slave connection.

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self._handlers[task] = writer
        peer = writer.get_extra_info("peername")
        connection: _SlaveConnection | None = None
        try:
            if self._stopping:
                return
            codec = ReplicationConnection(Role.MASTER)
            nonce = secrets.token_bytes(NONCE_BYTES) if self._authenticate else None
            if nonce is not None:
                writer.write(encode_challenge(nonce))
            handshake = await self._read_handshake(reader, codec, nonce)
            if handshake is None:
                return
            start = self._check_handshake(handshake)
            connection = self._attach(handshake, start, writer, codec)
            log.info("slave %d (%s) connected from offset %d", handshake.broker_id, peer, start)
            await self._run(connection, reader)
        except (RemoteProtocolError, AckRejected, HandshakeRefused, QuorumqError, OSError, TimeoutError) as exc:
            if not self._stopping:
                log.warning("replication connection from %s closed: %s: %s", peer, type(exc).__name__, exc)
        except asyncio.CancelledError:
            if not self._stopping:
                raise
        finally:
            if connection is not None:
                self._detach(connection)
            writer.close()
            del self._handlers[task]

    async def _read_handshake(self, reader: asyncio.StreamReader, codec: ReplicationConnection,
                              nonce: bytes | None) -> Handshake | None:
        """The slave's handshake; with a challenge sent (`nonce`), only after an answer that
        proves the slave holds the inner credentials (else HandshakeRefused)."""
        async with asyncio.timeout(self._housekeeping_s):
            answer = None
            if nonce is not None:
                buffer = b""
                while (answer := decode_answer(buffer)) is None:
                    if not (data := await reader.read(limits.REPLICATION_READ_BYTES)):
                        return None
                    buffer += data
                codec.feed(buffer[answer[2]:])
            while True:
                event = codec.next_event()
                if event is NEED_DATA:
                    codec.feed(await reader.read(limits.REPLICATION_READ_BYTES))
                    continue
                if isinstance(event, ConnectionClosed):
                    return None
                assert isinstance(event, Handshake), event  # the transition table admits nothing else
                if nonce is not None and answer is not None and (
                        reason := refusal(self._inner, nonce, answer[0], answer[1], event)):
                    raise HandshakeRefused(f"slave {event.broker_id} not authenticated: {reason}")
                return event

    def _check_handshake(self, handshake: Handshake) -> int:
        """Refuse a slave that does not fit; else where its stream starts: where its log ends, or
        for an empty log where this one begins now that older segments are gone (spec scenario
        28), or its last segment when the slave asks for syncFromLastFile (scenario 29)."""
        if (handshake.cluster_name, handshake.broker_name) != (self.cluster_name, self.broker_name):
            raise HandshakeRefused(f"slave of {handshake.cluster_name}/{handshake.broker_name} at the master "
                                   f"of {self.cluster_name}/{self.broker_name}")
        if handshake.epoch > self.epoch:
            raise HandshakeRefused(f"slave knows epoch {handshake.epoch}, this master is at {self.epoch}")
        if handshake.max_offset == 0:
            return self._store.last_segment_start if handshake.sync_from_last_file else self._store.min_offset
        if not self._store.min_offset <= handshake.max_offset <= self._store.max_offset:
            # Above: the slave holds bytes this master lacks (truncation is the controller's job).
            # Below: this master no longer has the bytes the slave needs next.
            raise HandshakeRefused(f"slave {handshake.broker_id} ends at {handshake.max_offset}, outside "
                                   f"this commit log [{self._store.min_offset}, {self._store.max_offset}]")
        return handshake.max_offset

    def _attach(self, handshake: Handshake, start: int, writer: asyncio.StreamWriter,
                codec: ReplicationConnection) -> _SlaveConnection:
        slave_id = handshake.broker_id
        previous = self._connections.pop(slave_id, None)
        if previous is not None:
            log.warning("slave %d connected again; its previous connection is closed", slave_id)
            previous.writer.close()
        session = self.tracker.attach(slave_id, start, handshake.acks_flushed)
        writer.transport.set_write_buffer_limits(high=_WRITE_BUFFER_HIGH_BYTES)
        connection = _SlaveConnection(handshake, session, writer, codec, start)
        self._connections[slave_id] = connection
        return connection

    def _detach(self, connection: _SlaveConnection) -> None:
        slave_id = connection.handshake.broker_id
        if self._connections.get(slave_id) is connection:
            del self._connections[slave_id]
        if self.tracker.detach(slave_id, connection.session):
            log.info("slave %d disconnected", slave_id)
            if not self._stopping:
                self._on_slave_lost(slave_id)

    async def _run(self, connection: _SlaveConnection, reader: asyncio.StreamReader) -> None:
        """Send and receive until either side ends, raising what ended it."""
        sender = asyncio.create_task(self._send_loop(connection))
        receiver = asyncio.create_task(self._receive_loop(connection, reader))
        try:
            done, _ = await asyncio.wait((sender, receiver), return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (sender, receiver):
                task.cancel()
            await asyncio.gather(sender, receiver, return_exceptions=True)
        # What the receiver met comes first: once the slave has closed, or sent a bad frame, the
        # sender's failure to use the connection is only its consequence.
        first = receiver if receiver in done else sender
        if first.exception() is not None:
            raise first.exception()

    def _send_data(self, connection: _SlaveConnection) -> bool:
        """Write the DATA frame of the records from the connection's position on, if any."""
        position = connection.position
        epoch, epoch_start, epoch_end = self._position_epoch(position)  # re-read per frame (#9689)
        limit = self._batch_bytes if epoch_end is None else min(self._batch_bytes, epoch_end - position)
        connection.master_offset_at_send = self._store.max_offset
        data = self._store.read_raw(position, limit)
        if not data:
            return False
        assert epoch_end is None or position + len(data) <= epoch_end, (position, len(data), epoch_end)
        connection.writer.write(connection.codec.encode(Data(epoch, epoch_start, position, self._confirm_offset(),
                                                             data)))
        connection.position = position + len(data)
        self.tracker.on_sent(connection.handshake.broker_id, connection.session, connection.position)
        return True

    async def _send_loop(self, connection: _SlaveConnection) -> None:
        writer, codec = connection.writer, connection.codec
        while True:
            connection.wake.clear()
            if self._send_data(connection):
                await writer.drain()
                # drain() does not yield while the socket takes everything; a slave catching up
                # must not keep the loop from the put path.
                await asyncio.sleep(0)
                continue
            connection.idle = True
            try:
                async with asyncio.timeout(self._heartbeat_s):
                    await connection.wake.wait()
            except TimeoutError:
                epoch, epoch_start, _ = self._position_epoch(self._store.max_offset)
                writer.write(codec.encode(Heartbeat(epoch, epoch_start, self._store.max_offset,
                                                    self._confirm_offset())))
                await writer.drain()
            finally:
                connection.idle = False

    async def _receive_loop(self, connection: _SlaveConnection, reader: asyncio.StreamReader) -> None:
        slave_id, session, codec = connection.handshake.broker_id, connection.session, connection.codec
        while True:
            async with asyncio.timeout(self._housekeeping_s):
                codec.feed(await reader.read(limits.REPLICATION_READ_BYTES))
            while (event := codec.next_event()) is not NEED_DATA:
                if isinstance(event, ConnectionClosed):
                    return
                assert isinstance(event, Ack), event  # the transition table admits nothing else
                self.release(self.tracker.on_slave_ack(slave_id, session, event.written_offset,
                                                       event.flushed_offset))

    def _confirm_offset(self) -> int:
        return self.tracker.confirmed_offset(self._store.max_offset)
