"""The replication frame codec: round trips, session rules, and the h11 fuzz invariant.

Invariant (as h11's fuzz/afl-server.py states it): any byte string fed to a connection, whole or
one byte at a time, either decodes to valid events or raises RemoteProtocolError, never anything
else. Inputs are seeded random bytes and valid streams with truncations, flipped bits, spliced
garbage and shuffled frames; the seed is in every failure message.
"""

import random
import struct
import zlib

import pytest

from quorumq import limits
from quorumq.core.replication_frames import (
    MAGIC,
    NEED_DATA,
    TRANSITIONS,
    Ack,
    ConnectionClosed,
    Data,
    Direction,
    FrameType,
    Handshake,
    Heartbeat,
    LocalProtocolError,
    RemoteProtocolError,
    ReplicationConnection,
    Role,
    State,
    encode_frame,
)

SEED = 20260301
HANDSHAKE = Handshake(2, "DefaultCluster", "broker-a", 1000, 3, False)


def drain(connection: ReplicationConnection) -> list:
    events = []
    while (event := connection.next_event()) is not NEED_DATA:
        events.append(event)
        if isinstance(event, ConnectionClosed):
            break
    return events


def master_stream(rng: random.Random, start: int = 1000, frames: int = 12) -> tuple[list, bytes]:
    """A valid master -> slave byte stream after HANDSHAKE, and its events."""
    events, offset, epoch, epoch_start = [], start, 3, 0
    for _ in range(frames):
        if rng.random() < 0.1:
            epoch, epoch_start = epoch + 1, offset
        if rng.random() < 0.3:
            events.append(Heartbeat(epoch, epoch_start, offset + rng.randint(0, 50), rng.randint(0, offset)))
        else:
            data = rng.randbytes(rng.randint(1, 300))
            events.append(Data(epoch, epoch_start, offset, rng.randint(0, offset), data))
            offset += len(data)
    return events, b"".join(encode_frame(event) for event in events)


def slave_stream(rng: random.Random, frames: int = 8) -> tuple[list, bytes]:
    events, written = [HANDSHAKE], HANDSHAKE.max_offset
    for _ in range(frames):
        written += rng.randint(0, 500)
        events.append(Ack(written, rng.randint(0, written)))
    return events, b"".join(encode_frame(event) for event in events)


def slave_side() -> ReplicationConnection:
    """A slave connection that has sent HANDSHAKE and expects the master's stream."""
    connection = ReplicationConnection(Role.SLAVE)
    connection.encode(HANDSHAKE)
    return connection


# Round trips.

def test_round_trip_master_to_slave_whole_and_byte_at_a_time():
    rng = random.Random(SEED)
    events, stream = master_stream(rng)
    whole = slave_side()
    whole.feed(stream)
    assert drain(whole) == events
    single = slave_side()
    decoded = []
    for byte in stream:
        single.feed(bytes([byte]))
        decoded.extend(drain(single))
    assert decoded == events
    single.feed(b"")
    assert drain(single) == [ConnectionClosed()]
    assert single.state is State.CLOSED


def test_round_trip_slave_to_master_and_the_sender_side_encodes_the_same_bytes():
    rng = random.Random(SEED + 1)
    events, stream = slave_stream(rng)
    sender = ReplicationConnection(Role.SLAVE)
    assert b"".join(sender.encode(event) for event in events) == stream
    master = ReplicationConnection(Role.MASTER)
    master.feed(stream)
    assert drain(master) == events
    assert master.state is State.TRANSFER and master.stream_offset == HANDSHAKE.max_offset


def test_round_trip_edge_values():
    big = (1 << 63) - 1
    cases = [
        Handshake(big, "c" * limits.NAME_LENGTH_MAX, "b" * limits.NAME_LENGTH_MAX, big, (1 << 32) - 1,
                  True, True, True),
        Handshake(1, "c", "名前", 0, 0, False, False),
        Ack(big, big),
        Ack(0, 0),
    ]
    master = ReplicationConnection(Role.MASTER)
    master.feed(b"".join(encode_frame(event) for event in cases[:1] + cases[2:]))
    assert drain(master) == cases[:1] + cases[2:]
    other = ReplicationConnection(Role.MASTER)
    other.feed(encode_frame(cases[1]))
    assert drain(other) == [cases[1]]
    slave = ReplicationConnection(Role.SLAVE)
    slave.encode(Handshake(1, "c", "b", big - 1, (1 << 32) - 1, False))
    last = Data((1 << 32) - 1, big - 1, big - 1, big, b"x")
    slave.feed(encode_frame(last) + encode_frame(Heartbeat((1 << 32) - 1, big - 1, big, big)))
    assert drain(slave) == [last, Heartbeat((1 << 32) - 1, big - 1, big, big)]


def test_a_frame_of_the_largest_size_passes():
    data = bytes(limits.REPLICATION_FRAME_DATA_BYTES_MAX)
    connection = slave_side()
    connection.feed(encode_frame(Data(3, 0, 1000, 0, data)))
    [event] = drain(connection)
    assert len(event.data) == len(data)


def test_frame_layout_is_as_documented():
    frame = encode_frame(Ack(7, 5))
    magic, frame_type, written, flushed, length, crc = struct.unpack(">IBqqII", frame)
    assert (magic, frame_type, written, flushed, length) == (MAGIC, FrameType.ACK, 7, 5, 0)
    assert crc == zlib.crc32(frame[:-4])
    frame = encode_frame(Data(1, 2, 3, 4, b"abc"))
    assert struct.unpack(">IBIqqqI", frame[:37]) == (MAGIC, FrameType.DATA, 1, 2, 3, 4, 3)
    assert struct.unpack(">I", frame[37:41])[0] == zlib.crc32(frame[41:], zlib.crc32(frame[:37]))


# Event validation (local errors).

@pytest.mark.parametrize("build", [
    lambda: Data(0, 0, 0, 0, b""),  # empty data
    lambda: Data(0, 10, 5, 0, b"x"),  # the epoch starts after the data
    lambda: Data(-1, 0, 0, 0, b"x"),
    lambda: Data(1 << 32, 0, 0, 0, b"x"),
    lambda: Data(0, 0, (1 << 63) - 1, 0, b"x"),  # the end overflows
    lambda: Data(0, 0, 0, 0, bytearray(b"x")),
    lambda: Data(0, 0, 0, 0, bytes(limits.REPLICATION_FRAME_DATA_BYTES_MAX + 1)),
    lambda: Heartbeat(0, 0, -1, 0),
    lambda: Heartbeat(0, 0, 0, -5),
    lambda: Handshake(0, "c", "b", 0, 0, False),  # 0 is the master's id
    lambda: Handshake(1, "", "b", 0, 0, False),
    lambda: Handshake(1, "c", "b" * (limits.NAME_LENGTH_MAX + 1), 0, 0, False),
    lambda: Handshake(1, "c", "b", 0, 0, 1),
    lambda: Handshake(True, "c", "b", 0, 0, False),
    lambda: Ack(5, 6),  # flushed above written
    lambda: Ack(-1, 0),
])
def test_invalid_events_cannot_be_built(build):
    with pytest.raises(LocalProtocolError):
        build()


# Session rules.

def test_transition_table_is_the_only_way_through():
    slave = ReplicationConnection(Role.SLAVE)
    with pytest.raises(LocalProtocolError):
        slave.encode(Ack(0, 0))  # before the handshake
    master = ReplicationConnection(Role.MASTER)
    with pytest.raises(LocalProtocolError):
        master.encode(Heartbeat(0, 0, 0, 0))  # before the slave's handshake
    with pytest.raises(LocalProtocolError):
        master.encode(ConnectionClosed())
    # Every (role, state, direction, event) the table lacks is refused.
    samples = [HANDSHAKE, Ack(1000, 0), Data(3, 0, 1000, 0, b"x"), Heartbeat(3, 0, 1000, 0)]
    for role in Role:
        for event in samples:
            for state in (State.HANDSHAKE, State.TRANSFER):
                connection = ReplicationConnection(role)
                if state is State.TRANSFER:
                    if role is Role.SLAVE:
                        connection.encode(HANDSHAKE)
                    else:
                        connection.feed(encode_frame(HANDSHAKE))
                        drain(connection)
                allowed_out = (role, state, Direction.SEND, type(event)) in TRANSITIONS
                try:
                    connection.encode(event)
                    assert allowed_out
                except LocalProtocolError:
                    assert not allowed_out


def test_master_receiving_master_frames_is_a_remote_error():
    master = ReplicationConnection(Role.MASTER)
    master.feed(encode_frame(Data(0, 0, 0, 0, b"x")))
    with pytest.raises(RemoteProtocolError, match="not sent to a master"):
        master.next_event()
    with pytest.raises(RemoteProtocolError):
        master.next_event()  # the connection stays failed
    assert master.state is State.ERROR


def test_a_second_handshake_is_a_remote_error():
    master = ReplicationConnection(Role.MASTER)
    master.feed(encode_frame(HANDSHAKE) * 2)
    assert master.next_event() == HANDSHAKE
    with pytest.raises(RemoteProtocolError):
        master.next_event()


@pytest.mark.parametrize("frame, message", [
    (Data(3, 0, 1001, 0, b"x"), "gap"),
    (Data(3, 0, 999, 0, b"x"), "overlap"),
    (Data(2, 0, 1000, 0, b"x"), "epoch goes back"),  # the slave knows epoch 3
    (Heartbeat(3, 0, 999, 0), "below"),  # the master's log ends below the slave's
])
def test_slave_stream_rules(frame, message):
    slave = slave_side()
    slave.feed(encode_frame(frame))
    with pytest.raises(RemoteProtocolError, match=message):
        slave.next_event()


def test_an_empty_log_may_begin_at_the_first_data_and_then_continues_exactly():
    """Scenarios 28 and 29: the master streams an empty slave its newer part only."""
    slave = ReplicationConnection(Role.SLAVE)
    slave.encode(Handshake(2, "DefaultCluster", "broker-a", 0, 3, False, sync_from_last_file=True))
    slave.feed(encode_frame(Data(3, 0, 4096, 0, b"x")))
    assert len(drain(slave)) == 1 and slave.stream_offset == 4097
    slave.feed(encode_frame(Data(3, 0, 8192, 0, b"y")))
    with pytest.raises(RemoteProtocolError, match="gap"):
        slave.next_event()


def test_an_epoch_keeps_its_start_offset_and_a_new_epoch_may_begin():
    slave = slave_side()
    slave.feed(encode_frame(Data(3, 500, 1000, 0, b"x")) + encode_frame(Data(4, 1001, 1001, 0, b"y")))
    assert len(drain(slave)) == 2 and slave.epoch == 4 and slave.stream_offset == 1002
    slave.feed(encode_frame(Data(4, 1000, 1002, 0, b"z")))
    with pytest.raises(RemoteProtocolError, match="moves its start"):
        slave.next_event()


def test_master_side_asserts_its_own_stream_is_contiguous():
    master = ReplicationConnection(Role.MASTER)
    master.feed(encode_frame(HANDSHAKE))
    drain(master)
    master.encode(Data(3, 0, 1000, 0, b"abc"))
    with pytest.raises(LocalProtocolError, match="gap"):
        master.encode(Data(3, 0, 1004, 0, b"x"))


def test_specific_garbage_is_a_remote_error():
    good = encode_frame(Ack(10, 5))
    cases = {
        "bad magic": b"\x00" * len(good),
        "unknown type": struct.pack(">IB", MAGIC, 99) + bytes(40),
        "crc": good[:-1] + bytes([good[-1] ^ 1]),
        "data on an ack": _reframe(struct.Struct(">IBqqII"), (MAGIC, FrameType.ACK, 10, 5), b"x"),
        "negative offset": _reframe(struct.Struct(">IBqqII"), (MAGIC, FrameType.ACK, -1, -1), b""),
        "flushed above written": _reframe(struct.Struct(">IBqqII"), (MAGIC, FrameType.ACK, 1, 2), b""),
        "unknown flag": _reframe(struct.Struct(">IBqqIBBII"), (MAGIC, FrameType.HANDSHAKE, 1, 0, 0, 0x80, 1),
                                 b"cb"),
        "cluster length": _reframe(struct.Struct(">IBqqIBBII"), (MAGIC, FrameType.HANDSHAKE, 1, 0, 0, 0, 9),
                                   b"cb"),
        "not utf-8": _reframe(struct.Struct(">IBqqIBBII"), (MAGIC, FrameType.HANDSHAKE, 1, 0, 0, 0, 1),
                              b"c\xff"),
        "empty name": _reframe(struct.Struct(">IBqqIBBII"), (MAGIC, FrameType.HANDSHAKE, 1, 0, 0, 0, 2),
                               b"cb"),
    }
    for name, data in cases.items():
        master = ReplicationConnection(Role.MASTER)
        if name in ("data on an ack", "negative offset", "flushed above written"):
            master.feed(encode_frame(HANDSHAKE))
            drain(master)
        master.feed(data)
        with pytest.raises(RemoteProtocolError):
            drain(master)
            pytest.fail(name)


def test_oversized_frames_are_refused_from_the_header_alone():
    header = struct.Struct(">IBIqqqII").pack(MAGIC, FrameType.DATA, 3, 0, 1000, 0,
                                             limits.REPLICATION_FRAME_DATA_BYTES_MAX + 1, 0)
    slave = slave_side()
    slave.feed(header)
    with pytest.raises(RemoteProtocolError, match="data bytes"):
        slave.next_event()


def test_eof_inside_a_frame_is_a_remote_error_and_between_frames_a_close():
    frame = encode_frame(HANDSHAKE)
    master = ReplicationConnection(Role.MASTER)
    master.feed(frame[:-3])
    master.feed(b"")
    with pytest.raises(RemoteProtocolError, match="inside a frame"):
        master.next_event()
    master = ReplicationConnection(Role.MASTER)
    master.feed(b"")
    assert master.next_event() == ConnectionClosed() and master.next_event() == ConnectionClosed()
    with pytest.raises(LocalProtocolError):
        master.feed(b"late")


def _reframe(header: struct.Struct, fields: tuple, data: bytes) -> bytes:
    """A frame with a correct crc around arbitrary field values (to reach the checks behind it)."""
    without_crc = header.pack(*fields, len(data), 0)[:-4]
    return without_crc + zlib.crc32(data, zlib.crc32(without_crc)).to_bytes(4, "big") + data


# Fuzzing: the h11 invariant.

def feed_all(role: Role, stream: bytes, chunk_sizes) -> list:
    """Feed `stream` in chunks and then EOF; return the events, or raise RemoteProtocolError."""
    connection = ReplicationConnection(role) if role is Role.MASTER else slave_side()
    events, position = [], 0
    for size in chunk_sizes:
        if position >= len(stream):
            break
        connection.feed(stream[position:position + size])
        position += size
        events.extend(drain(connection))
    connection.feed(b"")
    events.extend(drain(connection))
    return events


def check_invariant(role: Role, stream: bytes, rng: random.Random, label: str) -> None:
    outcomes = []
    for chunks in ([len(stream) + 1], [1] * (len(stream) + 1),
                   [rng.randint(1, 64) for _ in range(len(stream) + 1)]):
        try:
            outcomes.append(("events", feed_all(role, stream, chunks)))
        except RemoteProtocolError as exc:
            outcomes.append(("error", type(exc)))
        except Exception as exc:  # noqa: BLE001 - the invariant under test
            raise AssertionError(f"{label}: {type(exc).__name__}: {exc}") from exc
    # How the bytes are split never changes the outcome.
    assert all(outcome == outcomes[0] for outcome in outcomes), label


def mutations(rng: random.Random, stream: bytes):
    yield "truncated", stream[:rng.randrange(len(stream))]
    flipped = bytearray(stream)
    for _ in range(rng.randint(1, 3)):
        flipped[rng.randrange(len(flipped))] ^= 1 << rng.randrange(8)
    yield "flipped", bytes(flipped)
    cut = rng.randrange(len(stream))
    yield "spliced", stream[:cut] + rng.randbytes(rng.randint(1, 40)) + stream[cut:]
    yield "deleted", stream[:cut] + stream[cut + rng.randint(1, 8):]


def test_fuzz_random_bytes_either_decode_or_raise_remote_errors():
    rng = random.Random(SEED)
    for case in range(300):
        stream = rng.randbytes(rng.randint(0, 120))
        if rng.random() < 0.5:  # a valid prefix gets the parser past the magic more often
            stream = struct.pack(">IB", MAGIC, rng.randint(0, 5)) + stream
        for role in Role:
            check_invariant(role, stream, rng, f"seed={SEED} case={case} role={role}")


def test_fuzz_mutated_valid_streams():
    rng = random.Random(SEED + 7)
    for case in range(150):
        for role, (_, stream) in ((Role.SLAVE, master_stream(rng, frames=6)),
                                  (Role.MASTER, slave_stream(rng, frames=4))):
            check_invariant(role, stream, rng, f"seed={SEED + 7} case={case} valid")
            for name, mutated in mutations(rng, stream):
                check_invariant(role, mutated, rng, f"seed={SEED + 7} case={case} {name} role={role}")


def test_fuzz_flipped_bits_are_always_caught():
    """Any single flipped bit in a valid stream raises: the crc covers header and data, and the
    magic, type and length fields are checked before it."""
    rng = random.Random(SEED + 11)
    _, stream = master_stream(rng, frames=3)
    for bit in range(len(stream) * 8):
        flipped = bytearray(stream)
        flipped[bit // 8] ^= 1 << (bit % 8)
        with pytest.raises(RemoteProtocolError):
            feed_all(Role.SLAVE, bytes(flipped), [len(flipped)])
