"""The limits on a broker's connections, as a hostile or careless client meets them: an idle
connection is closed while one with an open stream is not, an address past its connection cap is
refused, and a connection that never reads its answers holds a bounded number of bytes while the
broker serves everyone else. The hostile client speaks raw HTTP/2, as no gRPC client can be made
to stop reading."""

import select
import socket
import time
import uuid
from functools import partial
from pathlib import Path

import grpc
import pytest
from rocketmq.grpc_protocol import definition_pb2 as v5
from rocketmq.grpc_protocol import service_pb2 as v5s
from rocketmq.grpc_protocol import service_pb2_grpc as v5_grpc

from harness import (
    MESSAGING_SERVICE,
    LocalCluster,
    RawConnection,
    async_check_for,
    check_for,
    log_end,
    log_since,
    process_of,
)
from quorumq.client import FOUND, ClientError, Message, Producer, PullConsumer
from quorumq.cluster import cluster_pb2 as pb
from quorumq.errors import Error

KiB, MiB = 1024, 1024 * 1024
IDLE_MS = 1000
CONNECTIONS = 16
CALLS_PER_CONNECTION = 64
PENDING_BYTES = 8 * MiB
BODY = 1 * MiB
BODIES = 4  # one PullBatch answer: 4 MiB
UNREAD_PULLS = 30  # 120 MiB of answers, 240 MB held before the limit (the answer and gRPC's copy)
# The broker's RSS may grow by the connection's room (held twice: the answer and gRPC's copy of it),
# one more answer always let through, and allocator slack; it grew by 240 MB before the limit.
RSS_GROWTH_MAX = 2 * PENDING_BYTES + 2 * BODY * BODIES + 32 * MiB


@pytest.fixture(scope="module")
def limited_cluster(tmp_path_factory):
    cluster = LocalCluster(tmp_path_factory.mktemp("limited"), sets={
        "grpcClientIdleTimeMills": str(IDLE_MS), "grpcMaxConnectionsPerAddress": "8",
        "grpcMaxConnections": str(CONNECTIONS), "grpcMaxConcurrentCallsPerConnection": str(CALLS_PER_CONNECTION),
        "grpcPendingAnswerBytesPerConnection": str(PENDING_BYTES)})
    try:
        yield cluster.start()
    finally:
        cluster.stop()


def broker_of(cluster: dict) -> dict:
    return process_of(cluster, "broker")


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * KiB
    raise AssertionError(f"no VmRSS for {pid}")


def test_an_idle_connection_is_closed_and_one_with_an_open_stream_is_not(limited_cluster):
    address = broker_of(limited_cluster)["address"]
    idle, streaming = RawConnection(address), RawConnection(address)
    try:
        assert idle.settings()[3] == CALLS_PER_CONNECTION  # SETTINGS_MAX_CONCURRENT_STREAMS
        streaming.call(MESSAGING_SERVICE + "Telemetry", None)
        assert idle.closed_within(IDLE_MS / 1000 + 3), "a connection without calls is closed after the idle timeout"
        assert not streaming.closed_within(2 * IDLE_MS / 1000), "an open Telemetry stream keeps its connection"
    finally:
        idle.close()
        streaming.close()


async def test_answers_a_connection_never_reads_are_bounded_and_others_are_served(limited_cluster):
    broker, topic = broker_of(limited_cluster), f"T{uuid.uuid4().hex[:10]}"
    access_point = limited_cluster["access_point"]
    bodies = [bytes([i]) * BODY for i in range(BODIES)]
    async with Producer(access_point) as producer:
        results = await producer.send_batch(topic, [Message(body) for body in bodies], queue_id=0)
    assert [r.status for r in results] == ["SEND_OK"] * BODIES
    request = pb.PullBatchRequest(group="G", topic=topic, queue_id=0, offset=0, max_count=BODIES).SerializeToString()

    before, position = rss_bytes(broker["pid"]), log_end(broker)
    hostile = RawConnection(broker["address"])
    try:
        for _ in range(UNREAD_PULLS):
            hostile.call("/quorumq.cluster.MessageReader/PullBatch", request)
        # Two answers fill the connection's room; every other one waits, then its call is refused.
        check_for(20, 0.2, lambda: log_since(broker, position).count("has not taken") >= UNREAD_PULLS - 3,
                  "the answers past the connection's room refused")
        grown = rss_bytes(broker["pid"]) - before
        assert grown < RSS_GROWTH_MAX, f"the broker grew by {grown / MiB:.0f} MiB for answers nobody reads"

        async with PullConsumer(access_point, "G2") as consumer:  # another connection is served at once
            started = time.monotonic()
            result = await consumer.pull(topic, 0, 0, BODIES)
        assert result.status == FOUND and [m.body for m in result.messages] == bodies
        assert time.monotonic() - started < 2
    finally:
        hostile.close()


async def test_unread_answers_are_bounded_server_wide_and_a_connection_that_reads_none_is_closed(start_cluster):
    """Two connections that never read hold the server's total of unsent answers (each within its
    own room): an answer to anyone else is refused at once, until the broker closes them."""
    unread_ms = 4000
    cluster = start_cluster(sets={"grpcPendingAnswerBytesPerConnection": str(PENDING_BYTES),
                                  "grpcPendingAnswerBytesTotal": str(2 * PENDING_BYTES),
                                  "grpcUnreadAnswerTimeoutMills": str(unread_ms)})
    broker, topic = broker_of(cluster), f"T{uuid.uuid4().hex[:10]}"
    bodies = [bytes([i]) * BODY for i in range(BODIES)]
    async with Producer(cluster["access_point"]) as producer:
        await producer.send_batch(topic, [Message(body) for body in bodies], queue_id=0)
    request = pb.PullBatchRequest(group="G", topic=topic, queue_id=0, offset=0, max_count=BODIES).SerializeToString()
    answers_per_connection = PENDING_BYTES // (BODY * BODIES)  # each fills its connection's room

    hostile = [RawConnection(broker["address"]) for _ in range(2)]
    try:
        for connection in hostile:
            for _ in range(answers_per_connection):
                connection.call("/quorumq.cluster.MessageReader/PullBatch", request)
        async with PullConsumer(cluster["access_point"], "G2") as consumer:
            async def refused() -> ClientError | None:
                try:
                    await consumer.pull(topic, 0, 0, BODIES)
                except ClientError as error:
                    return error
                return None

            error = await async_check_for(10, 0.1, refused, "a pull refused while the total is held")
            assert error.error is Error.TOO_MANY_REQUESTS and "grpcPendingAnswerBytesTotal" in error.detail, error
            for connection in hostile:
                assert connection.closed_within(3 * unread_ms / 1000), "a connection that reads nothing is closed"
            # The total is free again once gRPC has ended the closed connections' calls, which it
            # does just after their client sees the close.
            result = await async_check_for(5, 0.05, lambda: consumer.pull(topic, 0, 0, BODIES),
                                           "a pull served once the connections are closed")
            assert result.status == FOUND and [m.body for m in result.messages] == bodies
    finally:
        for connection in hostile:
            connection.close()


def test_an_address_past_its_connection_cap_is_refused(limited_cluster):
    address = broker_of(limited_cluster)["address"]
    # Each channel with its own subchannel pool: a connection of its own.
    channels = [grpc.insecure_channel(address, options=[("grpc.use_local_subchannel_pool", 1)]) for _ in range(10)]
    request = v5s.HeartbeatRequest(client_type=v5.ClientType.PRODUCER)
    try:
        answered, refused = 0, []
        for channel in channels:
            try:
                v5_grpc.MessagingServiceStub(channel).Heartbeat(request, timeout=5)
                answered += 1
            except grpc.RpcError as error:
                refused.append(error)
        # A connection of the module's earlier tests may still be closing, so at most 8 are answered.
        assert 0 < answered <= 8 and len(refused) == 10 - answered
        assert all(e.code() is grpc.StatusCode.RESOURCE_EXHAUSTED for e in refused)
        errors = [ClientError.from_rpc(e) for e in refused]  # the entry by its code, as quorumq's client reads it
        assert all(e.error is Error.TOO_MANY_REQUESTS for e in errors), errors
        assert "grpcMaxConnectionsPerAddress" in errors[0].detail
        v5_grpc.MessagingServiceStub(channels[0]).Heartbeat(request, timeout=5)  # a counted one still calls
    finally:
        for channel in channels:
            channel.close()


def test_connections_past_the_total_are_refused_until_some_close(limited_cluster):
    address = broker_of(limited_cluster)["address"]
    host, port = address.rsplit(":", 1)
    request = v5s.HeartbeatRequest(client_type=v5.ClientType.PRODUCER)

    def heartbeat() -> bool:
        with grpc.insecure_channel(address, options=[("grpc.use_local_subchannel_pool", 1)]) as channel:
            return v5_grpc.MessagingServiceStub(channel).Heartbeat(request, timeout=2).status.code == v5.Code.OK

    def refused_when_full() -> bool:
        """Whether a heartbeat's connection is refused while CONNECTIONS silent ones are open. The
        module's earlier connections may still be closing on the server, which then refuses (closes)
        some of the silent ones instead and serves the heartbeat once they are gone: then try again."""
        silent = [socket.create_connection((host, int(port))) for _ in range(CONNECTIONS)]  # never say a word
        try:
            try:
                outcome = f"answered {heartbeat()}"
            except grpc.RpcError as error:
                if error.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                    return True
                outcome = f"{error.code()}: {error.details()}"
            if not any(map(closed_by_server, silent)):  # pytest.fail: check_for takes an AssertionError for "not yet"
                pytest.fail(f"a connection past grpcMaxConnections was served: {outcome}")
            return False
        finally:
            for sock in silent:
                sock.close()

    check_for(30, 0.5, refused_when_full, "a connection past the total refused")
    check_for(5, 0.1, heartbeat, "a new connection served once the silent ones closed")


def closed_by_server(sock: socket.socket) -> bool:
    """Whether the other end closed the connection: it reads as ended, or reset."""
    if not select.select([sock], [], [], 0)[0]:
        return False
    try:
        return sock.recv(1, socket.MSG_PEEK) == b""
    except ConnectionError:
        return True


async def test_clients_that_close_their_connections_are_not_counted_against_the_cap(start_cluster):
    """Short-lived clients one after another, far more than the cap within the idle timeout (a
    script's each poll a new client): all are served, as only open connections count; the cap
    still refuses a connection past it while that many are held open."""
    cap = 8
    cluster = start_cluster(sets={"grpcMaxConnectionsPerAddress": str(cap)})
    access_point, topic = cluster["access_point"], f"T{uuid.uuid4().hex[:10]}"
    async with Producer(access_point) as producer:
        await producer.send_batch(topic, [Message(b"m")], queue_id=0)
    for _ in range(cap + 50):  # each a new connection to the name server and to the broker
        async with PullConsumer(access_point, "G") as consumer:
            assert await consumer.query_offset(topic, 0, "END") == 1

    address = broker_of(cluster)["address"]
    channels = [grpc.insecure_channel(address, options=[("grpc.use_local_subchannel_pool", 1)])
                for _ in range(cap + 1)]

    def heartbeat(channel: grpc.Channel) -> v5s.HeartbeatResponse:
        return v5_grpc.MessagingServiceStub(channel).Heartbeat(
            v5s.HeartbeatRequest(client_type=v5.ClientType.PRODUCER), timeout=5)

    try:
        for channel in channels[:cap]:  # held open: each counts
            check_for(5, 0.1, partial(heartbeat, channel), "a connection within the cap served")
        with pytest.raises(grpc.RpcError) as refused:
            heartbeat(channels[cap])
        error = ClientError.from_rpc(refused.value)
        assert error.error is Error.TOO_MANY_REQUESTS and "grpcMaxConnectionsPerAddress" in error.detail, error
    finally:
        for channel in channels:
            channel.close()
