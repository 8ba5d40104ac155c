"""A master and slaves in one process over real TCP on 127.0.0.1, with real stores in tmp_path.

Goal: the replication stream gives each slave a commit log byte-identical to the master's at the
same offsets and the same consume queues; `wait_acked` succeeds once enough slaves acked and times
out with FLUSH_SLAVE_TIMEOUT without them; a slave resumes from its own offset after the master
restarts; protocol violations on either side end the connection and nothing else.
Method: messages go in through `MessageStore.append(MessageIn...)` only (the record layout is the
store's business), and the comparison uses `read_raw` and `get_messages`.
"""

import asyncio
import contextlib
import random

import pytest

from harness import async_check_for
from quorumq import limits
from quorumq.clock import Clock
from quorumq.core.put_status import PutStatus
from quorumq.core.replication_frames import NEED_DATA, Ack, Data, Handshake, ReplicationConnection, Role, encode_frame
from quorumq.replication import ReplicationMaster, ReplicationSlave
from quorumq.store import MessageIn, MessageStore

SEGMENT_BYTES = 64 * 1024  # the smallest segment: the stream crosses segment ends and BLANKs
CLUSTER, BROKER = "DefaultCluster", "broker-a"
WAIT_S = 5.0
GAP = limits.HA_MAX_GAP_NOT_IN_SYNC_DEFAULT


def open_store(root, segment_bytes: int = SEGMENT_BYTES) -> MessageStore:
    store = MessageStore(root, segment_bytes=segment_bytes, store_host="127.0.0.1:10911", clock=Clock())
    store.open()
    return store


def messages(rng: random.Random, start: int, count: int) -> list[MessageIn]:
    return [MessageIn(topic=rng.choice(["A", "B"]), queue_id=rng.randrange(3),
                      body=f"m{start + index}:".encode() + rng.randbytes(rng.randint(1, 3000)),
                      properties={"KEYS": f"k{start + index}"}, born_timestamp_ms=1_700_000_000_000 + index,
                      born_host="127.0.0.1:40000") for index in range(count)]


def append(master_store: MessageStore, master: ReplicationMaster, batch: list[MessageIn]) -> int:
    end = master_store.append(batch).end_offset
    master.notify_appended()
    return end


def raw_log(store: MessageStore) -> bytes:
    chunks, offset = [], store.min_offset
    while data := store.read_raw(offset, 1 << 20):
        chunks.append(data)
        offset += len(data)
    assert offset == store.max_offset
    return b"".join(chunks)


def queues(store: MessageStore) -> dict:
    found = {}
    for topic in store.topics():
        for queue_id in store.topic_queue_ids(topic):
            result = store.get_messages(topic, queue_id, 0, 10_000, 1 << 30)
            found[topic, queue_id] = [(m.queue_offset, m.commit_log_offset, m.body) for m in result.messages]
    return found


def new_master(store, port=0, **options) -> ReplicationMaster:
    options.setdefault("heartbeat_interval_s", 0.2)
    options.setdefault("housekeeping_interval_s", 2.0)
    return ReplicationMaster(store, clock=Clock(), cluster_name=CLUSTER, broker_name=BROKER, port=port,
                             transfer_batch_bytes=4096, **options)


def new_slave(store, port, broker_id=1, **options) -> ReplicationSlave:
    options.setdefault("heartbeat_interval_s", 0.2)
    options.setdefault("housekeeping_interval_s", 2.0)
    return ReplicationSlave(store, clock=Clock(), master_host="127.0.0.1", master_port=port, broker_id=broker_id,
                            cluster_name=CLUSTER, broker_name=BROKER, backoff_min_s=0.02, backoff_max_s=0.2,
                            **options)


async def caught_up(master_store, *slave_stores) -> None:
    await async_check_for(WAIT_S, 0.01, lambda: all(s.max_offset == master_store.max_offset for s in slave_stores),
                          "slaves caught up")


@pytest.fixture
async def group(tmp_path):
    """A master and two slaves (the second acks fsync'd bytes), all started; stopped at teardown."""
    master_store = open_store(tmp_path / "master")
    slave_stores = [open_store(tmp_path / f"slave-{index}") for index in (1, 2)]
    master = new_master(master_store)
    await master.start()
    slaves = [new_slave(slave_stores[0], master.port, 1),
              new_slave(slave_stores[1], master.port, 2, acks_flushed=True)]
    for slave in slaves:
        slave.start()
    yield master_store, master, slave_stores, slaves
    for slave in slaves:
        await slave.stop()
    await master.stop()
    for store in [master_store, *slave_stores]:
        store.close()


async def test_slaves_get_byte_identical_logs_and_the_same_queues(group):
    master_store, master, slave_stores, slaves = group
    rng = random.Random(7)
    append(master_store, master, messages(rng, 0, 40))  # some written before the slaves connect
    await caught_up(master_store, *slave_stores)
    for round_ in range(20):
        append(master_store, master, messages(rng, 100 * (round_ + 1), rng.randint(1, 20)))
        await asyncio.sleep(0)
    await caught_up(master_store, *slave_stores)
    assert master_store.max_offset > 4 * SEGMENT_BYTES  # several segments, each ended by a BLANK
    expected_log, expected_queues = raw_log(master_store), queues(master_store)
    for store in slave_stores:
        assert raw_log(store) == expected_log
        assert queues(store) == expected_queues
    assert {1, 2} == set(master.slaves)
    assert master.in_sync_replicas(GAP) == 3


async def test_wait_acked_succeeds_with_an_ack_and_times_out_without_one(group):
    master_store, master, slave_stores, slaves = group
    rng = random.Random(8)
    await async_check_for(WAIT_S, 0.01, lambda: master.in_sync_replicas(GAP) == 3, "both slaves in sync")
    loop = asyncio.get_running_loop()
    end = append(master_store, master, messages(rng, 0, 5))
    assert await master.wait_acked(end, 3, loop.time() + WAIT_S) is PutStatus.PUT_OK
    assert slave_stores[1].flushed_offset >= end  # the SYNC_FLUSH slave acked only after its fsync
    assert await master.wait_acked(end, 1, loop.time()) is PutStatus.PUT_OK  # need 1 never waits

    await slaves[1].stop()
    await async_check_for(WAIT_S, 0.01, lambda: set(master.slaves) == {1}, "slave 2 detached")
    end = append(master_store, master, messages(rng, 10, 5))
    assert await master.wait_acked(end, 2, loop.time() + WAIT_S) is PutStatus.PUT_OK
    started = loop.time()
    assert await master.wait_acked(end, 3, started + 0.3) is PutStatus.FLUSH_SLAVE_TIMEOUT
    assert 0.29 <= loop.time() - started < 2.0

    await slaves[0].stop()
    await async_check_for(WAIT_S, 0.01, lambda: not master.slaves, "slave 1 detached")
    before = master_store.max_offset
    end = append(master_store, master, messages(rng, 20, 1))
    assert await master.wait_acked(end, 2, loop.time() + 0.2) is PutStatus.FLUSH_SLAVE_TIMEOUT
    assert master_store.max_offset == end > before  # the message stays on the master
    assert master.in_sync_replicas(GAP) == 1


async def test_waiting_puts_are_released_in_order_by_one_ack(group):
    master_store, master, slave_stores, slaves = group
    await slaves[1].stop()
    await caught_up(master_store, slave_stores[0])
    loop = asyncio.get_running_loop()
    rng = random.Random(9)
    ends = [append(master_store, master, messages(rng, index * 10, 3)) for index in range(20)]
    results = await asyncio.gather(*(master.wait_acked(end, 2, loop.time() + WAIT_S) for end in ends))
    assert results == [PutStatus.PUT_OK] * 20


async def test_slave_resumes_from_its_own_offset_after_the_master_restarts(tmp_path):
    master_store = open_store(tmp_path / "master")
    slave_store = open_store(tmp_path / "slave")
    master = new_master(master_store)
    await master.start()
    port = master.port
    slave = new_slave(slave_store, port)
    slave.start()
    rng = random.Random(10)
    try:
        append(master_store, master, messages(rng, 0, 30))
        await caught_up(master_store, slave_store)
        resume_at = slave_store.max_offset

        await master.stop()
        master_store.close()
        await async_check_for(WAIT_S, 0.01, lambda: not slave.connected, "slave noticed")
        master_store = open_store(tmp_path / "master")
        append_only = master_store.append(messages(rng, 100, 10)).end_offset  # written while no master runs
        master = new_master(master_store, port=port)
        await master.start()
        await async_check_for(WAIT_S, 0.01, lambda: 1 in master.slaves, "slave reconnected")
        assert master.slaves[1].max_offset == resume_at  # it asked for what it lacks, not from 0
        await caught_up(master_store, slave_store)
        assert slave_store.max_offset == append_only
        append(master_store, master, messages(rng, 200, 10))
        await caught_up(master_store, slave_store)
        assert raw_log(slave_store) == raw_log(master_store)
        assert queues(slave_store) == queues(master_store)
        assert slave.sessions >= 2
    finally:
        await slave.stop()
        await master.stop()
        master_store.close()
        slave_store.close()


async def test_master_refuses_a_slave_that_lies_about_its_offsets(tmp_path):
    """A hand-driven slave: a handshake beyond the master's log is refused; an ack beyond what
    was sent closes the connection (RocketMQ #3015); the real slave is unaffected."""
    master_store = open_store(tmp_path / "master")
    master = new_master(master_store)
    await master.start()
    rng = random.Random(11)
    end = append(master_store, master, messages(rng, 0, 3))
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", master.port)
        writer.write(encode_frame(Handshake(5, CLUSTER, BROKER, end + 100, 0, False)))
        assert await asyncio.wait_for(reader.read(), WAIT_S) == b""  # refused: closed
        writer.close()

        reader, writer = await asyncio.open_connection("127.0.0.1", master.port)
        writer.write(encode_frame(Handshake(5, CLUSTER, "broker-b", 0, 0, False)))
        assert await asyncio.wait_for(reader.read(), WAIT_S) == b""  # another broker's slave
        writer.close()

        reader, writer = await asyncio.open_connection("127.0.0.1", master.port)
        writer.write(encode_frame(Handshake(5, CLUSTER, BROKER, 0, 0, False)) + encode_frame(Ack(0, 0)))
        await async_check_for(WAIT_S, 0.01, lambda: 5 in master.slaves, "liar attached")
        writer.write(encode_frame(Ack(end + 1, 0)))  # more than the master has: a lie
        await async_check_for(WAIT_S, 0.01, lambda: 5 not in master.slaves, "liar detached")
        writer.close()
        assert master.in_sync_replicas(GAP) == 1
        loop = asyncio.get_running_loop()
        assert await master.wait_acked(end, 2, loop.time() + 0.1) is PutStatus.FLUSH_SLAVE_TIMEOUT
    finally:
        await master.stop()
        master_store.close()


@contextlib.asynccontextmanager
async def hand_driven_master(serve_connection):
    """A master played by the test: `serve_connection(reader, writer)` per connection; yields its port."""
    server = await asyncio.start_server(serve_connection, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        await server.wait_closed()


async def read_handshake(reader: asyncio.StreamReader) -> Handshake:
    """What a hand-driven master reads first from a slave."""
    codec = ReplicationConnection(Role.MASTER)
    while (event := codec.next_event()) is NEED_DATA:
        codec.feed(await reader.read(4096))
    return event


async def test_slave_drops_a_master_that_sends_a_gap_and_reconnects(tmp_path):
    """A hand-driven master sends DATA past the slave's end: the slave appends nothing, closes,
    and handshakes again from its own max offset."""
    slave_store = open_store(tmp_path / "slave")
    handshakes: list[Handshake] = []

    async def bad_master(reader, writer):
        event = await read_handshake(reader)
        handshakes.append(event)
        writer.write(encode_frame(Data(0, 0, event.max_offset + 10, 0, b"not a record")))
        await reader.read()  # until the slave closes
        writer.close()

    async with hand_driven_master(bad_master) as port:
        slave = new_slave(slave_store, port)
        slave.start()
        try:
            await async_check_for(WAIT_S, 0.01, lambda: len(handshakes) >= 3, "slave retried")
            assert slave_store.max_offset == 0 and slave.failures >= 2
            assert all(handshake.max_offset == 0 for handshake in handshakes)
        finally:
            await slave.stop()
            slave_store.close()


async def test_a_frame_that_never_ends_is_silence_to_the_slave(tmp_path):
    """F7 seed 461229838: a byte flipped in a DATA frame's length on the link left the slave
    waiting for a frame of megabytes while the master's heartbeats trickled in, so it never timed
    out and never rejoined the SyncStateSet. A hand-driven master sends such a frame's start and
    then a byte at a time: the slave must give up after the housekeeping interval and connect again."""
    slave_store = open_store(tmp_path / "slave")
    handshakes: list[Handshake] = []

    async def trickling_master(reader, writer):
        event = await read_handshake(reader)
        handshakes.append(event)
        frame = encode_frame(Data(0, 0, event.max_offset, 0, bytes(100_000)))
        try:
            for index in range(64, len(frame)):  # the header, then a byte every 20 ms
                writer.write(frame[:64] if index == 64 else frame[index:index + 1])
                await writer.drain()
                await asyncio.sleep(0.02)
        except ConnectionError:
            pass  # the slave gave up
        writer.close()

    async with hand_driven_master(trickling_master) as port:
        slave = new_slave(slave_store, port, heartbeat_interval_s=0.05, housekeeping_interval_s=0.3)
        slave.start()
        try:
            await async_check_for(WAIT_S, 0.01, lambda: len(handshakes) >= 2, "the slave connected again")
            assert slave_store.max_offset == 0
        finally:
            await slave.stop()
            slave_store.close()


async def test_a_large_record_on_a_slow_link_is_not_silence(tmp_path):
    """The other side of the rule above: a record larger than what arrives within the housekeeping
    interval keeps the session while its frame makes progress (a 1 MiB record at 640 KiB/s here,
    with a 1 s interval), and is appended whole."""
    master_store, slave_store = (open_store(tmp_path / name, segment_bytes=4 << 20) for name in ("master", "slave"))
    big = MessageIn(topic="A", queue_id=0, body=random.Random(5).randbytes(1 << 20), properties={},
                    born_timestamp_ms=1_700_000_000_000, born_host="127.0.0.1:40000")
    end = master_store.append([big]).end_offset
    handshakes: list[Handshake] = []

    async def slow_master(reader, writer):
        event = await read_handshake(reader)
        handshakes.append(event)
        frame = encode_frame(Data(0, 0, 0, 0, master_store.read_raw(0, end)))
        for start in range(0, len(frame), 64 * 1024):
            writer.write(frame[start:start + 64 * 1024])
            await writer.drain()
            await asyncio.sleep(0.1)
        await reader.read()  # until the slave closes
        writer.close()

    async with hand_driven_master(slow_master) as port:
        slave = new_slave(slave_store, port, housekeeping_interval_s=1.0)
        slave.start()
        try:
            await async_check_for(WAIT_S, 0.01, lambda: slave_store.max_offset == end, "the record appended")
            assert len(handshakes) == 1
        finally:
            await slave.stop()
            slave_store.close()
            master_store.close()


async def test_heartbeats_keep_an_idle_connection_and_a_silent_slave_is_dropped(tmp_path):
    """Idle for several housekeeping intervals: heartbeats and reports keep the session alive and
    carry the confirm offset. A slave that stops talking (as under SIGSTOP) is dropped after the
    housekeeping interval, and the puts waiting on it time out rather than hang."""
    master_store = open_store(tmp_path / "master")
    slave_store = open_store(tmp_path / "slave")
    master = new_master(master_store, heartbeat_interval_s=0.05, housekeeping_interval_s=0.3)
    await master.start()
    slave = new_slave(slave_store, master.port, heartbeat_interval_s=0.05, housekeeping_interval_s=0.3)
    slave.start()
    try:
        end = append(master_store, master, messages(random.Random(12), 0, 3))
        await caught_up(master_store, slave_store)
        await asyncio.sleep(1.0)  # idle past three housekeeping intervals: that heartbeats keep it up is tested
        assert slave.sessions == 1 and slave.failures == 0 and slave.connected
        assert slave.master_max_offset == end and slave.master_confirm_offset == end

        reader, writer = await asyncio.open_connection("127.0.0.1", master.port)
        writer.write(encode_frame(Handshake(9, CLUSTER, BROKER, end, 0, False)) + encode_frame(Ack(end, end)))
        await async_check_for(WAIT_S, 0.01, lambda: 9 in master.slaves, "silent slave attached")
        loop = asyncio.get_running_loop()
        more = append(master_store, master, messages(random.Random(13), 10, 1))
        assert await master.wait_acked(more, 3, loop.time() + 0.2) is PutStatus.FLUSH_SLAVE_TIMEOUT
        await async_check_for(WAIT_S, 0.01, lambda: 9 not in master.slaves, "silent slave dropped")
        assert master.in_sync_replicas(GAP) == 2
        writer.close()
    finally:
        await slave.stop()
        await master.stop()
        master_store.close()
        slave_store.close()
