"""The replication stream's wire format, sans I/O (in the manner of h11).

One TCP connection per slave. The slave opens it and sends a HANDSHAKE (who it is, where its
commit log ends, the epoch it knows, whether it acks fsync'd or written bytes, whether it is an
async learner that never joins the SyncStateSet, whether an empty log wants only the master's last
segment), then ACKs (its
written and flushed offsets) after writing and at least every haSendHeartbeatInterval. The master
answers with DATA frames (whole commit-log records, read from the slave's offset on) and with a
HEARTBEAT when it has nothing to send (its own max offset).

Every frame, big-endian:

    magic u32 | type u8 | fixed fields of the type | data_length u32 | crc u32 | data

where `crc` is zlib.crc32 of every header byte before it followed by the data. Fixed fields:

    DATA, HEARTBEAT   epoch u32 | epoch_start_offset i64 | offset i64 | confirm_offset i64
    HANDSHAKE         broker_id i64 | max_offset i64 | epoch u32 | flags u8 | cluster_length u8
                      (data: cluster name then broker name, UTF-8)
    ACK               written_offset i64 | flushed_offset i64

`epoch` / `epoch_start_offset` name the master epoch that wrote the data (0 / 0 without a
controller). DATA's `offset` is the commit-log offset of its first byte; HEARTBEAT's is the
master's max offset. `confirm_offset` is the offset the master knows to be on its slaves.

Use: `ReplicationConnection(Role.SLAVE)` (or MASTER) holds one side. `feed(bytes)` buffers what
the socket gave (`b""` is end of file); `next_event()` returns the next event or NEED_DATA;
`encode(event)` returns the bytes to write. The connection enforces the order of a session in
one transition table (HANDSHAKE first, then the transfer) and the stream rules the receiving
slave relies on: DATA continues exactly where the log ends (an empty log may begin at the first
DATA's offset, where the master's log now begins), epochs never go back, an epoch keeps its start
offset. Bad input from the peer raises `RemoteProtocolError` and nothing else; after
it the connection is in ERROR and every call raises again. Misuse by this side (an invalid event,
an event out of order) raises `LocalProtocolError`.
"""

import struct
import zlib
from dataclasses import dataclass
from enum import Enum, IntEnum
from typing import Callable

from quorumq import limits

MAGIC = 0x51515231  # "QQR1"
OFFSET_MAX = (1 << 63) - 1
EPOCH_MAX = (1 << 32) - 1
FLAG_ACKS_FLUSHED = 0x01
FLAG_ASYNC_LEARNER = 0x02
FLAG_SYNC_FROM_LAST_FILE = 0x04
_FLAGS_KNOWN = FLAG_ACKS_FLUSHED | FLAG_ASYNC_LEARNER | FLAG_SYNC_FROM_LAST_FILE


class ProtocolError(Exception):
    pass


class LocalProtocolError(ProtocolError):
    """This side tried something the protocol forbids: a bug of the caller."""


class RemoteProtocolError(ProtocolError):
    """The peer sent something the protocol forbids: close the connection."""


class _Sentinel:
    def __init__(self, name: str) -> None:
        self._name = name

    def __repr__(self) -> str:
        return self._name


NEED_DATA = _Sentinel("NEED_DATA")


def _check_int(name: str, value: int, low: int, high: int) -> None:
    if type(value) is not int or not low <= value <= high:
        raise LocalProtocolError(f"{name} {value!r} outside {low}..{high}")


def _check_position(epoch: int, epoch_start_offset: int, offset: int, confirm_offset: int) -> None:
    _check_int("epoch", epoch, 0, EPOCH_MAX)
    _check_int("epoch start offset", epoch_start_offset, 0, OFFSET_MAX)
    _check_int("offset", offset, epoch_start_offset, OFFSET_MAX)  # the epoch began at or before it
    _check_int("confirm offset", confirm_offset, 0, OFFSET_MAX)


@dataclass(frozen=True, slots=True)
class Data:
    """Whole commit-log records starting at commit-log `offset`."""

    epoch: int
    epoch_start_offset: int
    offset: int
    confirm_offset: int
    data: bytes

    def __post_init__(self) -> None:
        _check_position(self.epoch, self.epoch_start_offset, self.offset, self.confirm_offset)
        if type(self.data) is not bytes or not 0 < len(self.data) <= limits.REPLICATION_FRAME_DATA_BYTES_MAX:
            raise LocalProtocolError(f"DATA carries 1..{limits.REPLICATION_FRAME_DATA_BYTES_MAX} bytes")
        _check_int("data end", self.offset + len(self.data), 0, OFFSET_MAX)

    @property
    def end_offset(self) -> int:
        return self.offset + len(self.data)


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """The master is alive and its commit log ends at `offset`."""

    epoch: int
    epoch_start_offset: int
    offset: int
    confirm_offset: int

    def __post_init__(self) -> None:
        _check_position(self.epoch, self.epoch_start_offset, self.offset, self.confirm_offset)


@dataclass(frozen=True, slots=True)
class Handshake:
    """A slave introduces itself: its commit log ends at `max_offset`."""

    broker_id: int
    cluster_name: str
    broker_name: str
    max_offset: int
    epoch: int
    acks_flushed: bool  # its acks count fsync'd bytes (SYNC_FLUSH), not written ones
    async_learner: bool = False  # asyncLearner: it copies everything but never joins the SyncStateSet
    sync_from_last_file: bool = False  # syncFromLastFile: an empty log wants the master's last segment only

    def __post_init__(self) -> None:
        _check_int("broker id", self.broker_id, 1, OFFSET_MAX)  # 0 is the master's id
        _check_int("max offset", self.max_offset, 0, OFFSET_MAX)
        _check_int("epoch", self.epoch, 0, EPOCH_MAX)
        for flag in (self.acks_flushed, self.async_learner, self.sync_from_last_file):
            if type(flag) is not bool:
                raise LocalProtocolError("handshake flags must be bools")
        for name in (self.cluster_name, self.broker_name):
            if type(name) is not str or not 0 < len(name.encode()) <= limits.NAME_LENGTH_MAX:
                raise LocalProtocolError(f"name {name!r} must have 1..{limits.NAME_LENGTH_MAX} bytes")


@dataclass(frozen=True, slots=True)
class Ack:
    """A slave's report: its log is written up to `written_offset`, fsync'd up to `flushed_offset`."""

    written_offset: int
    flushed_offset: int

    def __post_init__(self) -> None:
        _check_int("written offset", self.written_offset, 0, OFFSET_MAX)
        _check_int("flushed offset", self.flushed_offset, 0, self.written_offset)


@dataclass(frozen=True, slots=True)
class ConnectionClosed:
    """The peer closed the connection between two frames."""


Event = Data | Heartbeat | Handshake | Ack | ConnectionClosed


# Frame layouts: the whole fixed header of each type, prefix and crc included.

class FrameType(IntEnum):
    DATA = 1
    HEARTBEAT = 2
    HANDSHAKE = 3
    ACK = 4


_PREFIX = struct.Struct(">IB")  # magic, type
_TRANSFER_HEADER = struct.Struct(">IBIqqqII")
_HANDSHAKE_HEADER = struct.Struct(">IBqqIBBII")
_ACK_HEADER = struct.Struct(">IBqqII")


@dataclass(frozen=True)
class _Layout:
    header: struct.Struct
    data_max: int
    decode: Callable[[tuple, bytes], Event]


def _decode_data(fields: tuple, data: bytes) -> Event:
    return Data(fields[2], fields[3], fields[4], fields[5], data)


def _decode_heartbeat(fields: tuple, data: bytes) -> Event:
    return Heartbeat(fields[2], fields[3], fields[4], fields[5])


def _decode_handshake(fields: tuple, data: bytes) -> Event:
    _, _, broker_id, max_offset, epoch, flags, cluster_length, _, _ = fields
    if flags & ~_FLAGS_KNOWN:
        raise RemoteProtocolError(f"unknown handshake flags {flags:#x}")
    if cluster_length > len(data):
        raise RemoteProtocolError(f"cluster name of {cluster_length} bytes in {len(data)} bytes of names")
    try:
        cluster_name = data[:cluster_length].decode()
        broker_name = data[cluster_length:].decode()
    except UnicodeDecodeError as exc:
        raise RemoteProtocolError(f"handshake names are not UTF-8: {exc}") from None
    return Handshake(broker_id, cluster_name, broker_name, max_offset, epoch, bool(flags & FLAG_ACKS_FLUSHED),
                     bool(flags & FLAG_ASYNC_LEARNER), bool(flags & FLAG_SYNC_FROM_LAST_FILE))


def _decode_ack(fields: tuple, data: bytes) -> Event:
    return Ack(fields[2], fields[3])


_LAYOUTS: dict[int, _Layout] = {
    FrameType.DATA: _Layout(_TRANSFER_HEADER, limits.REPLICATION_FRAME_DATA_BYTES_MAX, _decode_data),
    FrameType.HEARTBEAT: _Layout(_TRANSFER_HEADER, 0, _decode_heartbeat),
    FrameType.HANDSHAKE: _Layout(_HANDSHAKE_HEADER, 2 * limits.NAME_LENGTH_MAX, _decode_handshake),
    FrameType.ACK: _Layout(_ACK_HEADER, 0, _decode_ack),
}
assert all(layout.header.size <= limits.REPLICATION_FRAME_HEADER_BYTES_MAX for layout in _LAYOUTS.values())
assert all(layout.header.size >= _PREFIX.size + 8 for layout in _LAYOUTS.values())
assert all(layout.header.size + layout.data_max <= limits.REPLICATION_FRAME_BYTES_MAX for layout in _LAYOUTS.values())


def _frame(header: struct.Struct, fields: tuple, data: bytes) -> bytes:
    """Pack `fields` (everything before data_length), data_length and the crc, then the data."""
    without_crc = header.pack(*fields, len(data), 0)[:-4]
    crc = zlib.crc32(data, zlib.crc32(without_crc))
    return b"".join((without_crc, crc.to_bytes(4, "big"), data))


def encode_frame(event: Event) -> bytes:
    """The bytes of one frame, with no session rules (a connection's `encode` adds them)."""
    if isinstance(event, Data):
        return _frame(_TRANSFER_HEADER, (MAGIC, FrameType.DATA, event.epoch, event.epoch_start_offset,
                                         event.offset, event.confirm_offset), event.data)
    if isinstance(event, Heartbeat):
        return _frame(_TRANSFER_HEADER, (MAGIC, FrameType.HEARTBEAT, event.epoch, event.epoch_start_offset,
                                         event.offset, event.confirm_offset), b"")
    if isinstance(event, Handshake):
        cluster = event.cluster_name.encode()
        flags = ((FLAG_ACKS_FLUSHED if event.acks_flushed else 0) | (FLAG_ASYNC_LEARNER if event.async_learner else 0)
                 | (FLAG_SYNC_FROM_LAST_FILE if event.sync_from_last_file else 0))
        return _frame(_HANDSHAKE_HEADER, (MAGIC, FrameType.HANDSHAKE, event.broker_id, event.max_offset,
                                          event.epoch, flags, len(cluster)), cluster + event.broker_name.encode())
    if isinstance(event, Ack):
        return _frame(_ACK_HEADER, (MAGIC, FrameType.ACK, event.written_offset, event.flushed_offset), b"")
    raise LocalProtocolError(f"cannot encode {event!r}")


# The session: roles, states and the one table of transitions.

class Role(Enum):
    MASTER = "master"
    SLAVE = "slave"


class State(Enum):
    HANDSHAKE = "HANDSHAKE"  # before the slave's handshake
    TRANSFER = "TRANSFER"
    CLOSED = "CLOSED"  # the peer closed cleanly
    ERROR = "ERROR"


class Direction(Enum):
    SEND = "send"
    RECEIVE = "receive"


_M, _S, _H, _T = Role.MASTER, Role.SLAVE, State.HANDSHAKE, State.TRANSFER
_OUT, _IN = Direction.SEND, Direction.RECEIVE

# (role, state, direction, event type) -> next state. Anything absent is a protocol error.
TRANSITIONS: dict[tuple[Role, State, Direction, type], State] = {
    (_M, _H, _IN, Handshake): _T,
    (_M, _T, _IN, Ack): _T,
    (_M, _T, _OUT, Data): _T,
    (_M, _T, _OUT, Heartbeat): _T,
    (_S, _H, _OUT, Handshake): _T,
    (_S, _T, _OUT, Ack): _T,
    (_S, _T, _IN, Data): _T,
    (_S, _T, _IN, Heartbeat): _T,
    (_M, _H, _IN, ConnectionClosed): State.CLOSED,
    (_M, _T, _IN, ConnectionClosed): State.CLOSED,
    (_S, _H, _IN, ConnectionClosed): State.CLOSED,
    (_S, _T, _IN, ConnectionClosed): State.CLOSED,
}

# The frame types each role may receive.
_RECEIVED = {Role.MASTER: {FrameType.HANDSHAKE, FrameType.ACK},
             Role.SLAVE: {FrameType.DATA, FrameType.HEARTBEAT}}


class ReplicationConnection:
    """One side of one replication connection: bytes in, events out; events in, bytes out."""

    def __init__(self, role: Role) -> None:
        self.role = role
        self.state = State.HANDSHAKE
        self.stream_offset: int | None = None  # where the next DATA must start, once known
        self.data_seen = False  # an empty log's first DATA may begin past 0
        self.epoch: int | None = None  # the highest epoch seen on this connection
        self.epoch_start_offset: int | None = None
        self._buffer = bytearray()
        self._position = 0  # bytes of the buffer already turned into events
        self._eof = False
        self._received = _RECEIVED[role]

    # Receiving.

    def feed(self, data: bytes) -> None:
        """Buffer bytes from the socket; `b""` means the peer closed its side."""
        if self._eof and data:
            raise LocalProtocolError("data fed after end of file")
        if not data:
            self._eof = True
            return
        if self._position:
            del self._buffer[:self._position]  # keeps the buffer at most one frame plus one read
            self._position = 0
        self._buffer += data

    def next_event(self) -> Event | _Sentinel:
        if self.state is State.ERROR:
            raise RemoteProtocolError("the connection already failed")
        if self.state is State.CLOSED:
            return ConnectionClosed()
        try:
            event = self._read_frame()
            if isinstance(event, _Sentinel):  # NEED_DATA
                if not self._eof:
                    return NEED_DATA
                if self._position < len(self._buffer):
                    raise RemoteProtocolError("connection closed inside a frame")
                event = ConnectionClosed()
            self._apply(Direction.RECEIVE, event)
            return event
        except LocalProtocolError as exc:  # an invalid event built from peer bytes
            self.state = State.ERROR
            raise RemoteProtocolError(str(exc)) from None
        except RemoteProtocolError:
            self.state = State.ERROR
            raise

    def _read_frame(self) -> Event | _Sentinel:
        buffer, position = self._buffer, self._position
        available = len(buffer) - position
        if available < _PREFIX.size:
            return NEED_DATA
        magic, frame_type = _PREFIX.unpack_from(buffer, position)
        if magic != MAGIC:
            raise RemoteProtocolError(f"bad magic {magic:#010x}")
        if frame_type not in self._received:
            raise RemoteProtocolError(f"frame type {frame_type} is not sent to a {self.role.value}")
        layout = _LAYOUTS[frame_type]
        header = layout.header
        if available < header.size:
            return NEED_DATA
        fields = header.unpack_from(buffer, position)
        data_length, crc = fields[-2], fields[-1]
        if data_length > layout.data_max:
            raise RemoteProtocolError(f"frame type {frame_type} with {data_length} data bytes, at most "
                                      f"{layout.data_max}")
        end = position + header.size + data_length
        if len(buffer) < end:
            return NEED_DATA
        with memoryview(buffer) as view:
            computed = zlib.crc32(view[position + header.size:end],
                                  zlib.crc32(view[position:position + header.size - 4]))
            if computed != crc:
                raise RemoteProtocolError(f"frame crc {crc:#010x}, computed {computed:#010x}")
            data = bytes(view[position + header.size:end])
        self._position = end
        return layout.decode(fields, data)

    # Sending.

    def encode(self, event: Event) -> bytes:
        """The bytes to write for `event`; raises LocalProtocolError if it may not be sent now."""
        if self.state is State.ERROR:
            raise LocalProtocolError("the connection already failed")
        if isinstance(event, ConnectionClosed):
            raise LocalProtocolError("ConnectionClosed is not sent; close the socket")
        self._apply(Direction.SEND, event)
        return encode_frame(event)

    # The session rules.

    def _apply(self, direction: Direction, event: Event) -> None:
        """Check `event` against the transition table and the stream rules, then take it.
        Raises LocalProtocolError; the receive path reports it as the peer's error."""
        key = (self.role, self.state, direction, type(event))
        next_state = TRANSITIONS.get(key)
        if next_state is None:
            raise LocalProtocolError(f"{self.role.value} in {self.state.value} may not "
                                     f"{direction.value} {type(event).__name__}")
        if isinstance(event, Handshake):
            self.stream_offset = event.max_offset
            self.epoch = event.epoch
        elif isinstance(event, (Data, Heartbeat)):
            self._check_stream(event)
        self.state = next_state

    def _check_stream(self, event: Data | Heartbeat) -> None:
        assert self.stream_offset is not None and self.epoch is not None
        if event.epoch < self.epoch:
            raise LocalProtocolError(f"epoch goes back from {self.epoch} to {event.epoch}")
        if event.epoch == self.epoch and self.epoch_start_offset is not None \
                and event.epoch_start_offset != self.epoch_start_offset:
            raise LocalProtocolError(f"epoch {event.epoch} moves its start from {self.epoch_start_offset} "
                                     f"to {event.epoch_start_offset}")
        if isinstance(event, Data):
            begins = self.stream_offset == 0 and not self.data_seen
            if event.offset != self.stream_offset and not begins:
                kind = "gap" if event.offset > self.stream_offset else "overlap"
                raise LocalProtocolError(f"{kind}: DATA at {event.offset}, the log ends at {self.stream_offset}")
            self.stream_offset = event.end_offset
            self.data_seen = True
        elif event.offset < self.stream_offset:
            raise LocalProtocolError(f"the master's log ends at {event.offset}, below {self.stream_offset}")
        self.epoch = event.epoch
        self.epoch_start_offset = event.epoch_start_offset
