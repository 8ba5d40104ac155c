"""Totals per broker and per registration (issue 19): the name server takes the largest registration
a broker within its limits sends and refuses a larger one with TOO_MANY_REQUESTS, routing the others
meanwhile; a broker refuses a topic that would pass its queue total. A name server back from a
restart or an outage gets every topic of the broker's next registration, within seconds."""

import asyncio
import os
import socket
import time
from pathlib import Path

import grpc
import pytest
from rocketmq.grpc_protocol import definition_pb2 as v5
from rocketmq.grpc_protocol import service_pb2 as v5s
from rocketmq.grpc_protocol import service_pb2_grpc as v5_grpc

from harness import (
    async_check_for,
    log_end,
    log_since,
    peak_rss_bytes,
    process_of,
    reset_peak_rss,
    restart_process,
    start_process,
    stop_process,
)
from quorumq import limits
from quorumq.client import AdminClient, ClientError
from quorumq.cluster import cluster_pb2 as pb
from quorumq.cluster import cluster_pb2_grpc as pb_grpc
from quorumq.errors import Error
from quorumq.grpc_errors import sent_error

GRPC_DEFAULT_RECEIVE_BYTES = 4 * limits.MiB


def query_route(channel, topic: str) -> v5s.QueryRouteResponse:
    return v5_grpc.MessagingServiceStub(channel).QueryRoute(
        v5s.QueryRouteRequest(topic=v5.Resource(name=topic)), timeout=10)


def test_the_largest_registration_is_routed_and_a_larger_one_refused(shared_cluster):
    namesrv = process_of(shared_cluster, "namesrv")
    queues = limits.REGISTRATION_QUEUES_MAX // limits.REGISTRATION_TOPICS_MAX
    largest = pb.BrokerRegistration(cluster="Largest", broker_name="largest", broker_id=0, address="127.0.0.1:1",
                                    role="ASYNC_MASTER", default_queue_nums=queues, perm=6)
    largest.topics.extend(pb.TopicConfig(name=f"t{number:0{limits.NAME_LENGTH_MAX - 1}d}", read_queue_nums=queues,
                                         write_queue_nums=queues, perm=6, message_type=pb.MIXED)
                          for number in range(limits.REGISTRATION_TOPICS_MAX))
    assert largest.ByteSize() > GRPC_DEFAULT_RECEIVE_BYTES  # what the name server refused before
    last_topic = largest.topics[-1].name
    logged_before = log_end(namesrv)
    with grpc.insecure_channel(namesrv["address"]) as channel:
        names = pb_grpc.NameServerStub(channel)
        try:
            names.RegisterBroker(largest, timeout=30)
            route = query_route(channel, last_topic)
            assert route.status.code == v5.Code.OK, route.status.message
            assert {queue.broker.name for queue in route.message_queues} == {"largest"}

            largest.topics.add(name="one-more", read_queue_nums=1, write_queue_nums=1, perm=6)
            with pytest.raises(grpc.RpcError) as refused:
                names.RegisterBroker(largest, timeout=30)
            assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, refused.value
            assert sent_error(refused.value.trailing_metadata()).code == Error.TOO_MANY_REQUESTS.code
            assert f"0..{limits.REGISTRATION_TOPICS_MAX} topics" in refused.value.details()  # counted unparsed
            assert "RegisterBroker from ipv4:127.0.0.1" in log_since(namesrv, logged_before)

            # The refused registration changed nothing, and the real broker is still routed.
            assert query_route(channel, last_topic).status.code == v5.Code.OK
            real_broker = process_of(shared_cluster, "broker")["broker_name"]
            assert {queue.broker.name for queue in query_route(channel, "one-more").message_queues} == {real_broker}
        finally:
            names.UnregisterBroker(largest, timeout=10)


def test_a_registration_of_millions_of_empty_topics_is_refused_unparsed(shared_cluster):
    """As large as the name server takes (REGISTRATION_BYTES_MAX), of 4.6M empty topic entries:
    counted on its bytes and refused before protobuf builds an object for each (+350 MB)."""
    namesrv = process_of(shared_cluster, "namesrv")
    head = pb.BrokerRegistration(cluster="Huge", broker_name="huge", broker_id=0, address="127.0.0.1:1",
                                 role="ASYNC_MASTER").SerializeToString()
    empty_topic = bytes([pb.BrokerRegistration.TOPICS_FIELD_NUMBER << 3 | 2, 0])
    request = head + empty_topic * ((limits.REGISTRATION_BYTES_MAX - len(head)) // len(empty_topic))
    reset_peak_rss(namesrv["pid"])
    before = peak_rss_bytes(namesrv["pid"])
    with grpc.insecure_channel(namesrv["address"], options=[("grpc.max_send_message_length", -1)]) as channel:
        register = channel.unary_unary("/quorumq.cluster.NameServer/RegisterBroker",
                                       request_serializer=lambda raw: raw)
        with pytest.raises(grpc.RpcError) as refused:
            register(request, timeout=30)
        grown = peak_rss_bytes(namesrv["pid"]) - before
        assert grown < 64 * limits.MiB, f"the name server grew by {grown >> 20} MiB"  # the request's copies
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, refused.value
        error = ClientError.from_rpc(refused.value)
        assert error.error is Error.TOO_MANY_REQUESTS, error
        assert f"0..{limits.REGISTRATION_TOPICS_MAX} topics" in error.detail
        assert "huge" not in str(pb_grpc.NameServerStub(channel).GetClusterInfo(pb.Empty(), timeout=10))


async def test_a_broker_refuses_a_topic_past_its_queue_total(shared_cluster):
    broker = process_of(shared_cluster, "broker")
    async with AdminClient(shared_cluster["access_point"]) as admin:
        held = sum(max(config.read_queue_nums, config.write_queue_nums)
                   for config in (await admin.metadata(broker["address"])).topics)
        room = (limits.QUEUES_PER_BROKER_MAX - held) // limits.QUEUES_PER_TOPIC_MAX
        topics = [f"queue-total-{number}" for number in range(room + 1)]

        async def create(topic: str) -> None:
            await admin.update_topic(broker["address"], topic, limits.QUEUES_PER_TOPIC_MAX,
                                     limits.QUEUES_PER_TOPIC_MAX)

        try:
            await several(create, topics[:room])
            with pytest.raises(ClientError) as refused:
                await create(topics[-1])
            assert refused.value.error is Error.TOO_MANY_REQUESTS
            assert f"more than {limits.QUEUES_PER_BROKER_MAX}" in refused.value.detail
            # A broker at its totals still registers: its last topic is routed.
            route = await admin.route(topics[room - 1])
            assert route.queues[0].write_queue_nums == limits.QUEUES_PER_TOPIC_MAX
        finally:  # the module's other tests create topics on this broker
            await several(admin.delete_topic, topics[:room])


async def several(call, topics: list[str]) -> None:
    """`call` on each topic, several at a time, as an operator's script would."""
    for start in range(0, len(topics), 64):
        await asyncio.gather(*(call(topic) for topic in topics[start:start + 64]))


async def test_a_restarted_name_server_gets_every_topic_with_the_next_change(shared_cluster):
    """A topic change registers only the topics changed (an increment); a name server without this
    broker's earlier registration asks for every topic, so none goes missing from its routes.
    The broker's registrations fail while the name server is down and, for a second or two after it
    is back, while the broker's channel to it waits out gRPC's reconnect backoff; the change is
    answered all the same and the broker registers again soon: the test waits for the change's
    route, then reads the earlier topic's at once."""
    broker, namesrv = process_of(shared_cluster, "broker"), process_of(shared_cluster, "namesrv")
    async with AdminClient(shared_cluster["access_point"]) as admin:
        await admin.update_topic(broker["address"], "before-restart", 2, 2)
        restart_process(shared_cluster, namesrv)
        await async_check_for(10, 0.05, lambda: admin.cluster_info(), "the name server answers again")
        await admin.update_topic(broker["address"], "after-restart", 2, 2)
        await async_check_for(15, 0.05, lambda: routed(admin, broker, "after-restart"),
                              "the change routed by the new name server")
        assert await routed(admin, broker, "before-restart")


async def routed(admin: AdminClient, broker: dict, topic: str) -> bool:
    """Whether the name server routes `topic` to `broker` alone with its 2 queues (an unlisted topic
    routes to every auto-creating broker with the default count)."""
    queues = (await admin.route(topic)).queues
    return [(queue.broker_name, queue.write_queue_nums) for queue in queues] == [(broker["broker_name"], 2)]


# A name-server outage this long takes gRPC's default reconnect backoff (1 s, 1.6 times longer each
# failed attempt, 20% jitter) to its 6th attempt, 12.6 to 19 s after the first, and the next is 8.4 s
# or more later; a backoff bounded at 1 s tries again within 1.2 s.
OUTAGE_S = 12.0
# From the name server answering again to the broker routed by it: a connection attempt and the
# broker's next registration (REGISTER_RETRY_INTERVAL_S after a failed one), with room for a
# loaded machine.
ROUTED_AGAIN_S = 5.0


async def test_a_broker_is_routed_within_seconds_of_a_long_name_server_outage(shared_cluster):
    """A topic updated while the only name server is down is answered (the broker holds it; its
    registration failed), and routed within seconds of the name server answering again, however
    long the outage: the broker's channel to the name server retries its connection at most a
    second apart, where gRPC's default backoff grows to 120 s (a broker registered 14 s after a 60 s
    outage). The test holds the name server's port while it is down, turning each connection away,
    and starts the name server right after the broker's first attempt past OUTAGE_S."""
    broker, namesrv = process_of(shared_cluster, "broker"), process_of(shared_cluster, "namesrv")
    host, _, port = namesrv["address"].rpartition(":")
    async with AdminClient(shared_cluster["access_point"]) as admin:
        stop_process(namesrv)
        try:
            outage_end = time.monotonic() + OUTAGE_S
            await admin.update_topic(broker["address"], "during-outage", 2, 2)  # its first failed registration
            with socket.create_server((host, int(port))) as server:
                server.settimeout(OUTAGE_S + 60)  # a broker that never tries fails the test
                await asyncio.to_thread(turn_away, server, broker["pid"], outage_end)
        finally:
            start_process(namesrv)
        await async_check_for(10, 0.05, lambda: admin.cluster_info(), "the name server answers again")
        await async_check_for(ROUTED_AGAIN_S, 0.05, lambda: routed(admin, broker, "during-outage"),
                              "the topic routed by the name server back")


def turn_away(server: socket.socket, pid: int, until: float) -> None:
    """Accept and close each connection to `server` until one from process `pid` comes after
    `until` (time.monotonic())."""
    while True:
        connection, (_, port) = server.accept()
        with connection:
            if port in tcp_ports(pid) and time.monotonic() >= until:
                return


def tcp_ports(pid: int) -> set[int]:
    """The local ports of the TCP sockets process `pid` holds: its descriptors' socket inodes,
    looked up in /proc/PID/net/tcp and tcp6."""
    inodes = set()
    for descriptor in Path(f"/proc/{pid}/fd").iterdir():
        try:
            inodes.add(os.readlink(descriptor).removeprefix("socket:[").removesuffix("]"))
        except OSError:  # closed meanwhile
            pass
    rows = [line.split() for table in ("tcp", "tcp6")  # gRPC connects to IPv4 through IPv6 sockets too
            for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]]
    return {int(row[1].rpartition(":")[2], 16) for row in rows if row[9] in inodes}
